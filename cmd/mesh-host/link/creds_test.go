package link

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// meshBed is a real control plane: authority, embedded broker, control
// service signing credentials of ttl.
type meshBed struct {
	a   *authority.Authority
	url string
	acc *nodeservice.Accounts
}

func newMeshBed(t *testing.T, ttl time.Duration) *meshBed {
	t.Helper()
	a, _, err := authority.Init(filepath.Join(t.TempDir(), "control"), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})).With("side", "control")
	b, err := broker.New(a, broker.Config{Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	nc, err := client.Dial(a, []string{b.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	sys, err := nodeservice.DialSystem(a, []string{b.URL()}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sys.Close)
	m := &meshBed{a: a, url: b.URL(), acc: &nodeservice.Accounts{A: a, Sys: sys, Now: time.Now}}
	svc := &nodeservice.Service{Conn: nc, Mesh: testMesh, Key: a.DeclarationKey(), Log: log, Issuer: m.acc, CredentialTTL: ttl}
	if err := svc.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var runErr error
	done := make(chan struct{}) // closed when Run returns, with runErr
	ready := make(chan struct{})
	svc.Ready = func() { close(ready) }
	go func() { runErr = svc.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case <-done:
		t.Fatalf("the control service ended: %v", runErr)
	}
	return m
}

// enrol redeems a token for testNode as mesh-host enrol does and writes
// the credentials file.
func (m *meshBed) enrol(t *testing.T) string {
	t.Helper()
	enc, _, err := m.a.IssueToken(testNode, []string{m.url}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := linkproto.ParseToken(enc)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := nkeys.CreateUser()
	var creds []byte
	eventually(t, "the control service answers the enrolment", func() bool {
		creds, _, err = Enrol(context.Background(), tok, key, m.sealPub(t))
		return err == nil
	})
	path := filepath.Join(t.TempDir(), "node.creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// tls is what a host trusts the bed's broker by: the mesh's CA alone.
func (m *meshBed) tls(t *testing.T) *tls.Config {
	t.Helper()
	tc, err := m.a.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// sealPub is a node's public sealing key, as enrolment presents it.
func (m *meshBed) sealPub(t *testing.T) string {
	t.Helper()
	k, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := k.PublicKey()
	return pub
}

// fileCreds is a credentials file as mesh-host keeps it.
type fileCreds string

func (f fileCreds) read(t testing.TB) (*jwt.UserClaims, nkeys.KeyPair, error) {
	b, err := os.ReadFile(string(f))
	if err != nil {
		return nil, nil, err
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, nil, err
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, nil, err
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	return claims, kp, err
}

func (f fileCreds) Current() (string, time.Time, time.Time, error) {
	c, _, err := f.read(nil)
	if err != nil {
		return "", time.Time{}, time.Time{}, err
	}
	return c.Subject, time.Unix(c.IssuedAt, 0), time.Unix(c.Expires, 0), nil
}

func (f fileCreds) Replace(token string) error {
	_, kp, err := f.read(nil)
	if err != nil {
		return err
	}
	seed, _ := kp.Seed()
	b, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		return err
	}
	tmp := string(f) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, string(f))
}

// TestRenewalKeepsTheLinkAcrossExpiries: credentials of 3 s, renewed when
// a third is left, over four lifetimes: the link stays up, each renewal is
// journaled, and the broker never ends the connection for expiry.
func TestRenewalKeepsTheLinkAcrossExpiries(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 12 s")
	}
	const ttl = 3 * time.Second
	m := newMeshBed(t, ttl)
	creds := m.enrol(t)
	b := newBed(t, func(b *bed, cfg *Config) {
		cfg.URLs = []string{m.url}
		cfg.TLS, cfg.AllowPlaintext = m.tls(t), false
		cfg.CredsFile = creds
		cfg.Credentials = fileCreds(creds)
		cfg.Trust = m.a.SigningKey()
	})
	b.waitUp()
	_, _, first, _ := fileCreds(creds).Current()
	time.Sleep(4 * ttl)
	renewed := b.records(event.LinkRenewed)
	if len(renewed) < 4 {
		t.Fatalf("%d renewals journaled over four lifetimes, want at least 4", len(renewed))
	}
	last := first
	for _, r := range renewed {
		var p event.LinkRenewedPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if !p.Expires.After(last) || !strings.HasPrefix(p.Key, "U") {
			t.Errorf("renewal #%d: key %q expires %v, want a later expiry than %v", r.Seq, p.Key, p.Expires, last)
		}
		last = p.Expires
	}
	for _, r := range b.records(event.LinkDown) {
		var p event.LinkPayload
		_ = json.Unmarshal(r.Payload, &p)
		if p.Reason != "reconnecting with renewed credentials" {
			t.Errorf("link down #%d: %q; want only the reconnects onto renewed credentials", r.Seq, p.Reason)
		}
	}
	if _, _, now, _ := fileCreds(creds).Current(); !now.After(time.Now()) {
		t.Errorf("the credentials file expires at %v, in the past", now)
	}
}

// TestRevokedLinkIsJournaledAndStaysDown: revoked, the link goes down with
// the broker's reason, journaled; it keeps trying (offline is normal) and
// never comes back up on those credentials.
func TestRevokedLinkIsJournaledAndStaysDown(t *testing.T) {
	m := newMeshBed(t, time.Hour)
	creds := m.enrol(t)
	b := newBed(t, func(b *bed, cfg *Config) {
		cfg.URLs = []string{m.url}
		cfg.TLS, cfg.AllowPlaintext = m.tls(t), false
		cfg.CredsFile = creds
		cfg.Credentials = fileCreds(creds)
		cfg.Trust = m.a.SigningKey()
	})
	b.waitUp()
	nc, err := client.Dial(m.a, []string{m.url})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cl, err := client.NewClient(nc, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := cl.Revoke(context.Background(), testNode, m.acc); err != nil {
		t.Fatal(err)
	}
	var reason string
	eventually(t, "link.down and link.denied journaled", func() bool {
		denied := b.records(event.LinkDenied)
		if len(denied) == 0 || len(b.records(event.LinkDown)) == 0 {
			return false
		}
		var p event.LinkPayload
		_ = json.Unmarshal(denied[0].Payload, &p)
		reason = p.Reason
		return true
	})
	t.Logf("revoked → link.down and link.denied journaled in %v: %s", time.Since(start).Round(time.Millisecond), reason)
	if !strings.Contains(reason, "the broker refuses this node's credentials: nats: authentication revoked") {
		t.Errorf("link.denied reason %q, want the broker's revocation", reason)
	}
	time.Sleep(time.Second) // reconnect attempts, refused
	if ups := b.records(event.LinkUp); len(ups) != 1 {
		t.Errorf("%d link.up records, want the first only", len(ups))
	}
	if n := len(b.records(event.LinkDenied)); n != 1 {
		t.Errorf("%d link.denied records, want one: the refusals while down are not journaled again", n)
	}
}

// renewDue: every node renews when between a half and a third of its
// lifetime is left, always at the same point for one node, and the nodes
// of a batch enrolment (credentials issued together) spread over that
// window rather than ask at once.
func TestRenewalsOfABatchAreSpread(t *testing.T) {
	issued := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	const life = 720 * time.Hour
	expires := issued.Add(life)
	from, to := issued.Add(life/2), issued.Add(life*2/3)
	const nodes = 10000
	const buckets = 10
	var counts [buckets]int
	for i := range nodes {
		node := fmt.Sprintf("node-%05d", i)
		due := renewDue(node, issued, expires)
		if due.Before(from) || !due.Before(to) {
			t.Fatalf("%s renews at %v, outside [%v, %v)", node, due, from, to)
		}
		if again := renewDue(node, issued, expires); !again.Equal(due) {
			t.Fatalf("%s renews at %v, then at %v", node, due, again)
		}
		counts[int(due.Sub(from)*buckets/(to.Sub(from)))]++
	}
	// Each tenth of the window holds about a tenth of the nodes.
	for k, n := range counts {
		if n < nodes/buckets/2 || n > nodes/buckets*3/2 {
			t.Errorf("tenth %d of the window holds %d of %d renewals: %v", k, n, nodes, counts)
		}
	}
}
