package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

// host is the host's side of an enrolment, as mesh-host does it: a key
// made here, the token presented by its bootstrap user.
type host struct {
	kp   nkeys.KeyPair
	pub  string
	seed []byte
}

func newHost(t *testing.T) host {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	return host{kp: kp, pub: pub, seed: seed}
}

// token issues a token for node valid for ttl.
func (b *bed) token(node string, ttl time.Duration) string {
	b.t.Helper()
	enc, _, err := b.a.IssueToken(node, []string{b.url}, time.Now(), ttl)
	if err != nil {
		b.t.Fatal(err)
	}
	return enc
}

// enrol presents enc with h's public key as mesh-host does: connected as
// the token's bootstrap user. It returns the answer, verified.
func (b *bed) enrol(h host, enc string) (linkproto.Credential, error) {
	tok, err := linkproto.ParseToken(enc)
	if err != nil {
		return linkproto.Credential{}, err
	}
	nc, err := nats.Connect(b.url, b.tlsOpt(),
		nats.UserJWT(func() (string, error) { return tok.Bootstrap, nil }, func([]byte) ([]byte, error) { return nil, nil }),
		nats.CustomInboxPrefix(linkproto.EnrolledPrefix(tok.Mesh, tok.ID)))
	if err != nil {
		return linkproto.Credential{}, err
	}
	defer nc.Close()
	return b.present(nc, tok.ID, enc, h.pub)
}

// present sends an Enrol for token id over nc, whatever the token says:
// the way to force a token the host would refuse through to the service.
func (b *bed) present(nc *nats.Conn, id, enc, key string) (linkproto.Credential, error) {
	req := linkproto.Enrol{Protocol: linkproto.ProtocolVersion, Token: enc, Key: key, SealKey: testSealKey(b.t), Nonce: linkproto.NewNonce()}
	inbox := linkproto.EnrolledPrefix(testMesh, id) + "." + nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return linkproto.Credential{}, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(linkproto.EnrolSubject(testMesh, id), inbox, linkproto.Marshal(req)); err != nil {
		return linkproto.Credential{}, err
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		return linkproto.Credential{}, fmt.Errorf("no answer: %w", err)
	}
	var c linkproto.Credential
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &c); err != nil {
		return c, err
	}
	if err := c.Verify(b.a.SigningKey(), testMesh, c.Node, req.Nonce); err != nil {
		return c, err
	}
	if c.Refused != "" {
		return c, errors.New(c.Refused)
	}
	return c, nil
}

// creds writes h's credentials file from an answer.
func (h host) creds(t *testing.T, c linkproto.Credential) string {
	t.Helper()
	b, err := jwt.FormatUserConfig(c.JWT, h.seed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "node.creds")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestEnrolSignsTheHostsKeyOnce(t *testing.T) {
	b := newBed(t)
	b.serve(func(s *nodeservice.Service) { s.CredentialTTL = 10 * time.Minute })
	enc := b.token("web-1", time.Hour)
	h := newHost(t)
	c, err := b.enrol(h, enc)
	if err != nil {
		t.Fatalf("enrol: %v", err)
	}
	claims, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		t.Fatal(err)
	}
	if claims.Subject != h.pub || claims.Name != "web-1" {
		t.Errorf("the credentials are for %s (%s), want the host's key %s", claims.Subject, claims.Name, h.pub)
	}
	if d := time.Until(c.Expires); d < 9*time.Minute || d > 10*time.Minute || claims.Expires != c.Expires.Unix() {
		t.Errorf("expires in %v (JWT %d, answer %v), want the 10 minutes serve was told", d, claims.Expires, c.Expires)
	}
	nc, err := nats.Connect(b.url, b.tlsOpt(), nats.UserCredentials(h.creds(t, c)))
	if err != nil {
		t.Fatalf("the node connects with its new credentials: %v", err)
	}
	nc.Close()

	// A second use, even with the same key, is refused and says when the
	// first was.
	_, err = b.enrol(newHost(t), enc)
	if err == nil || !strings.Contains(err.Error(), "enrolment token already used: it was used at") || !strings.Contains(err.Error(), "to enrol web-1") {
		t.Fatalf("second use: %v, want refused as used", err)
	}
	if _, err := b.enrol(h, enc); err == nil {
		t.Fatal("second use with the same key was accepted")
	}

	rec, _, err := store.Credential(context.Background(), b.kv(linkproto.NodesBucket), testMesh, "web-1")
	if err != nil || rec == nil || rec.Key != h.pub || !rec.Expires.Equal(c.Expires) || !rec.Revoked.IsZero() {
		t.Fatalf("the node's record: %+v, %v", rec, err)
	}
}

// TestEnrolTwoAtOnceOneWins: two hosts presenting one token at the same
// time, to two control services: exactly one is enrolled.
func TestEnrolTwoAtOnceOneWins(t *testing.T) {
	b := newBed(t)
	b.serve()
	b.serve()
	enc := b.token("web-1", time.Hour)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { _, errs[i] = b.enrol(newHost(t), enc) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !strings.Contains(err.Error(), "already used"):
			t.Errorf("a loser's refusal: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent uses won, want 1: %v", won, len(errs), errs)
	}
}

func TestEnrolRefusesEditedTokens(t *testing.T) {
	b := newBed(t)
	b.serve()
	enc := b.token("web-1", time.Hour)
	tok, err := linkproto.ParseToken(enc)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		edit func(map[string]any)
	}{
		{"node renamed", func(m map[string]any) { m["node"] = "db-1" }},
		{"url changed", func(m map[string]any) { m["urls"] = []string{"nats://evil.example:4222"} }},
		{"expiry extended", func(m map[string]any) {
			m["expires"] = time.Now().Add(365 * 24 * time.Hour).UTC().Format(time.RFC3339)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			edited := editToken(t, enc, c.edit)
			// The host refuses it before sending anything.
			if _, err := linkproto.ParseToken(edited); !errors.Is(err, linkproto.ErrBadSignature) {
				t.Fatalf("the host parses the edited token: %v, want a bad signature", err)
			}
			// Forced through to the service, it is refused there too,
			// and the token stays unused.
			_, err := b.present(b.nc, tok.ID, edited, newHost(t).pub)
			if err == nil || !strings.Contains(err.Error(), "changed after it was issued") {
				t.Fatalf("the service: %v, want refused as changed", err)
			}
		})
	}
	// Re-signed with another key to pass the host's own check: the
	// service trusts only the mesh's.
	other, _ := linkproto.NewSigningKey()
	otherPub, _ := other.PublicKey()
	forged := tok
	forged.Node, forged.SigningKey = "db-1", otherPub
	forgedEnc, err := forged.Sign(other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.present(b.nc, tok.ID, forgedEnc, newHost(t).pub); err == nil || !strings.Contains(err.Error(), "signed by a key this node does not trust") {
		t.Fatalf("a token signed by another key: %v, want untrusted", err)
	}
	// None of it used the token.
	if _, err := b.enrol(newHost(t), enc); err != nil {
		t.Fatalf("the real token after the refusals: %v", err)
	}
}

func TestEnrolRefusesExpiredTokens(t *testing.T) {
	b := newBed(t)
	// The token's bootstrap user expires with it: the broker refuses it.
	expired, _, err := b.a.IssueToken("web-1", []string{b.url}, time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := linkproto.ParseToken(expired)
	if err := tok.Expired(time.Now()); !errors.Is(err, linkproto.ErrTokenExpired) || !strings.Contains(err.Error(), "it expired at") {
		t.Errorf("the host's check: %v", err)
	}
	b.serve()
	if _, err := b.enrol(newHost(t), expired); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		t.Errorf("the broker lets an expired bootstrap user in: %v", err)
	}
	// Forced through, the service refuses it by its clock.
	if _, err := b.present(b.nc, tok.ID, expired, newHost(t).pub); err == nil || !strings.Contains(err.Error(), "enrolment token expired: it expired at") {
		t.Errorf("the service: %v, want refused as expired", err)
	}
	// And by its clock alone, for a token the broker still admits.
	b2 := newBed(t)
	b2.serve(func(s *nodeservice.Service) { s.Now = func() time.Time { return time.Now().Add(2 * time.Hour) } })
	if _, err := b2.enrol(newHost(t), b2.token("web-1", time.Hour)); err == nil || !strings.Contains(err.Error(), "enrolment token expired") {
		t.Errorf("a token past its expiry by the service's clock: %v", err)
	}
}

func TestEnrolRefusesAnotherMeshsToken(t *testing.T) {
	b := newBed(t)
	b.serve()
	work, _, err := authority.Init(filepath.Join(t.TempDir(), "work"), "work")
	if err != nil {
		t.Fatal(err)
	}
	enc, tok, err := work.IssueToken("web-1", []string{b.url}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Its bootstrap user is another account's: the broker refuses it.
	if _, err := b.enrol(newHost(t), enc); err == nil {
		t.Fatal("another mesh's token enrolled")
	}
	if _, err := b.present(b.nc, tok.ID, enc, newHost(t).pub); err == nil || !strings.Contains(err.Error(), "signed by a key this node does not trust") {
		t.Errorf("the service: %v", err)
	}
}

// TestEnrolKeepsTheSeedOnTheHost: what travels and what the control plane
// stores hold the host's public key, never its seed.
func TestEnrolKeepsTheSeedOnTheHost(t *testing.T) {
	b := newBed(t)
	b.serve()
	spy, err := b.nc.SubscribeSync("mesh.home.>")
	if err != nil {
		t.Fatal(err)
	}
	// The server must know the subscription before the enrolment's
	// messages pass, or the spy sees none of them.
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	enc := b.token("web-1", time.Hour)
	linkprototest.NoSeed(t, "the token", linkprototest.TokenJSON(t, enc))
	h := newHost(t)
	c, err := b.enrol(h, enc)
	if err != nil {
		t.Fatal(err)
	}
	linkprototest.NoSeed(t, "the answer", string(linkproto.Marshal(c)))
	var seen []string
	for {
		m, err := spy.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		seen = append(seen, m.Subject)
		linkprototest.NoSeed(t, m.Subject, string(m.Data))
		if strings.Contains(string(m.Data), string(h.seed)) {
			t.Errorf("%s carries the host's seed", m.Subject)
		}
	}
	if len(seen) < 2 {
		t.Errorf("saw %v; want the enrolment and its answer", seen)
	}
	ctx := context.Background()
	for _, bucket := range []string{linkproto.TokensBucket, linkproto.NodesBucket} {
		keys, err := b.kv(bucket).Keys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			e, err := b.kv(bucket).Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			linkprototest.NoSeed(t, bucket+" "+k, string(e.Value()))
		}
	}
	// Nor does any file of the data directory, the broker's included.
	err = filepath.WalkDir(b.a.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(content, h.seed) {
			t.Errorf("%s holds the host's seed", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestRenewSignsTheSameKeyAgain(t *testing.T) {
	b := newBed(t)
	b.serve(func(s *nodeservice.Service) { s.CredentialTTL = time.Hour })
	h := newHost(t)
	first, err := b.enrol(h, b.token("web-1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.url, b.tlsOpt(), nats.UserCredentials(h.creds(t, first)), nats.CustomInboxPrefix(linkproto.InboxPrefix(testMesh, "web-1")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	renew := func(key string) (linkproto.Credential, error) {
		req := linkproto.Renew{Protocol: linkproto.ProtocolVersion, Node: "web-1", Key: key, Nonce: linkproto.NewNonce()}
		m, err := nc.Request(linkproto.RenewSubject(testMesh, "web-1"), linkproto.Marshal(req), 5*time.Second)
		if err != nil {
			return linkproto.Credential{}, err
		}
		var c linkproto.Credential
		if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &c); err != nil {
			return c, err
		}
		if err := c.Verify(b.a.SigningKey(), testMesh, "web-1", req.Nonce); err != nil {
			return c, err
		}
		if c.Refused != "" {
			return c, errors.New(c.Refused)
		}
		return c, nil
	}
	c, err := renew(h.pub)
	if err != nil {
		t.Fatal(err)
	}
	if claims, err := jwt.DecodeUserClaims(c.JWT); err != nil || claims.Subject != h.pub {
		t.Fatalf("renewed for %v (%v), want %s", claims, err, h.pub)
	}
	if _, err := renew(newHost(t).pub); err == nil || !strings.Contains(err.Error(), "not the one on record") {
		t.Errorf("renewal for another key: %v", err)
	}
	rec, _, _ := store.Credential(context.Background(), b.kv(linkproto.NodesBucket), testMesh, "web-1")
	if rec == nil || !rec.Expires.Equal(c.Expires) {
		t.Errorf("the record after renewal: %+v, want expiry %v", rec, c.Expires)
	}
}

// TestRevokeClosesTheConnectionAtOnce is requirement 4 against the
// embedded broker: within 5 s the node is disconnected and its reconnects
// are refused. The time it took is logged.
func TestRevokeClosesTheConnectionAtOnce(t *testing.T) {
	b := newBed(t)
	b.serve()
	revokeAndWatch(t, b, b.accounts())
}

// revokeAndWatch enrols web-1, connects it, revokes it, and checks the
// broker ends it.
func revokeAndWatch(t *testing.T, b *bed, acc *nodeservice.Accounts) time.Duration {
	t.Helper()
	h := newHost(t)
	c, err := b.enrol(h, b.token("web-1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	creds := h.creds(t, c)
	down := make(chan error, 16)
	nc, err := nats.Connect(b.url, b.tlsOpt(), nats.UserCredentials(creds),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.IgnoreAuthErrorAbort(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { down <- err }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { down <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	start := time.Now()
	if _, err := b.client(start).Revoke(context.Background(), "web-1", acc); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	var took time.Duration
	select {
	case err := <-down:
		took = time.Since(start)
		t.Logf("revoked → disconnected in %v (%v)", took, err)
	case <-time.After(5 * time.Second):
		t.Fatal("still connected 5 s after the revocation")
	}
	// It cannot come back: a fresh connection with the same credentials
	// is refused by name.
	_, err = nats.Connect(b.url, b.tlsOpt(), nats.UserCredentials(creds))
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
		t.Fatalf("reconnecting with revoked credentials: %v, want refused", err)
	}
	if nc.IsConnected() {
		t.Fatal("the revoked connection reconnected")
	}
	rec, _, _ := store.Credential(context.Background(), b.kv(linkproto.NodesBucket), testMesh, "web-1")
	if rec == nil || rec.Revoked.IsZero() {
		t.Errorf("the record after revoke: %+v", rec)
	}
	return took
}

func TestEnrolAgainRevokesThePreviousKey(t *testing.T) {
	b := newBed(t)
	b.serve()
	old := newHost(t)
	c, err := b.enrol(old, b.token("web-1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	oldCreds := old.creds(t, c)
	down := make(chan error, 4)
	nc, err := nats.Connect(b.url, b.tlsOpt(), nats.UserCredentials(oldCreds), nats.NoReconnect(),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { down <- err }))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := b.enrol(newHost(t), b.token("web-1", time.Hour)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-down:
	case <-time.After(5 * time.Second):
		t.Fatal("the old key's connection is still up after enrolling again")
	}
	if _, err := nats.Connect(b.url, b.tlsOpt(), nats.UserCredentials(oldCreds)); err == nil {
		t.Fatal("the previous key still connects")
	}
}

func TestRevokedNodeIsNotRenewed(t *testing.T) {
	b := newBed(t)
	b.serve()
	h := newHost(t)
	if _, err := b.enrol(h, b.token("web-1", time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.client(time.Now()).Revoke(context.Background(), "web-1", b.accounts()); err != nil {
		t.Fatal(err)
	}
	// The node itself cannot ask any more; the control user asks in its
	// name, into its inbox.
	req := linkproto.Renew{Protocol: linkproto.ProtocolVersion, Node: "web-1", Key: h.pub, Nonce: linkproto.NewNonce()}
	inbox := linkproto.InboxPrefix(testMesh, "web-1") + ".x"
	sub, _ := b.nc.SubscribeSync(inbox)
	if err := b.nc.PublishRequest(linkproto.RenewSubject(testMesh, "web-1"), inbox, linkproto.Marshal(req)); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var c linkproto.Credential
	if err := json.Unmarshal(m.Data, &c); err != nil || !strings.Contains(c.Refused, "credential revoked: web-1's key was revoked at") || c.JWT != "" {
		t.Fatalf("renewal of a revoked node: %+v, %v", c, err)
	}
}

// TestTokensMadeBeforeARevocationAreRefused: revoking or removing a node
// ends the tokens handed out for it so far, redeemed or not (an unused
// one would let it back); a token made afterwards enrols it again. A
// refused token is not spent.
func TestTokensMadeBeforeARevocationAreRefused(t *testing.T) {
	b := newBed(t)
	b.serve()
	ctx := context.Background()

	// Never enrolled: revoke refuses (no record) and still ends its token.
	early := b.token("web-1", time.Hour)
	if _, err := b.client(time.Now()).Revoke(ctx, "web-1", b.accounts()); !errors.Is(err, ErrNoRecord) || !strings.Contains(err.Error(), "any token made for it until now is refused") {
		t.Fatalf("revoke of a node never enrolled: %v", err)
	}
	_, err := b.enrol(newHost(t), early)
	if err == nil || !strings.Contains(err.Error(), "enrolment token refused: it was made at") || !strings.Contains(err.Error(), "web-1 was revoked at") {
		t.Fatalf("a token made before the revocation: %v, want refused", err)
	}
	later := b.token("web-1", time.Hour)
	if _, err := b.enrol(newHost(t), later); err != nil {
		t.Fatalf("a token made after the revocation: %v", err)
	}

	// Enrolled, then revoked: a second token handed out before is refused.
	spare := b.token("web-1", time.Hour)
	if _, err := b.client(time.Now()).Revoke(ctx, "web-1", b.accounts()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.enrol(newHost(t), spare); err == nil || !strings.Contains(err.Error(), "enrolment token refused") {
		t.Fatalf("a spare token after a revocation: %v, want refused", err)
	}

	// Removed: the same.
	if _, err := b.enrol(newHost(t), b.token("web-2", time.Hour)); err != nil {
		t.Fatal(err)
	}
	spare = b.token("web-2", time.Hour)
	if _, err := b.client(time.Now()).Remove(ctx, "web-2", b.accounts()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.enrol(newHost(t), spare); err == nil || !strings.Contains(err.Error(), "web-2 was removed at") {
		t.Fatalf("a spare token after a removal: %v, want refused", err)
	}
	// Refused, not spent: the record of its use was never made.
	tok, _ := linkproto.ParseToken(spare)
	if _, err := b.kv(linkproto.TokensBucket).Get(ctx, store.Key(testMesh, tok.ID)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a refused token's use: %v, want none recorded", err)
	}
	if _, err := b.enrol(newHost(t), b.token("web-2", time.Hour)); err != nil {
		t.Fatalf("enrolling a removed node afresh: %v", err)
	}
}

// editToken changes the JSON of an encoded token and keeps its signature.
func editToken(t *testing.T, enc string, edit func(map[string]any)) string {
	t.Helper()
	body, sig, _ := strings.Cut(strings.TrimPrefix(enc, "meshtoken2."), ".")
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	raw, _ = json.Marshal(m)
	return "meshtoken2." + base64.RawURLEncoding.EncodeToString(raw) + "." + sig
}

func TestNodeCredsConnect(t *testing.T) {
	b := newBed(t)
	n := b.node("web-1")
	if !n.nc.IsConnected() {
		t.Fatal("not connected")
	}
	n.noErrors(t)
}
