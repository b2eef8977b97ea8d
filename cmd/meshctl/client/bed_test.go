package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker/brokertest"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

const testMesh = "home"

// bed is one mesh on a real embedded broker on a random port: its
// authority, the broker, a control-user connection and JetStream.
type bed struct {
	t   testing.TB
	a   *authority.Authority
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
}

// newBed starts a broker in a temporary directory, with the streams and
// the bucket in place, but no control service.
func newBed(t testing.TB) *bed {
	t.Helper()
	a, b, log := brokertest.Start(t, testMesh)
	nc, err := Dial(a, []string{b.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := &nodeservice.Service{Conn: nc, Mesh: testMesh, Key: a.DeclarationKey(), Log: log}
	if err := s.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &bed{t: t, a: a, url: b.URL(), nc: nc, js: js, log: log}
}

// serve runs a control service until the test ends; opts change it
// before it runs.
func (b *bed) serve(opts ...func(*nodeservice.Service)) {
	b.t.Helper()
	nc, err := Dial(b.a, []string{b.url})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	s := &nodeservice.Service{Conn: nc, Mesh: testMesh, Key: b.a.DeclarationKey(), Log: b.log, Issuer: b.accounts()}
	for _, o := range opts {
		o(s)
	}
	go func() { done <- s.Run(ctx) }()
	b.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.t.Errorf("service: %v", err)
		}
		nc.Close()
	})
	// Its subscriptions are in place once it answers a sync.
	basetest.Eventually(b.t, 5*time.Second, func() error {
		q := linkproto.Sync{Protocol: linkproto.ProtocolVersion, Node: "probe"}
		inbox := linkproto.InboxPrefix(testMesh, "probe") + "." + nats.NewInbox()
		sub, err := b.nc.SubscribeSync(inbox)
		if err != nil {
			return err
		}
		defer sub.Unsubscribe()
		if err := b.nc.PublishRequest(linkproto.SyncSubject(testMesh, "probe"), inbox, linkproto.Marshal(q)); err != nil {
			return err
		}
		_, err = sub.NextMsg(200 * time.Millisecond)
		return err
	})
}

// accounts signs and revokes as serve does, over a system-user connection.
func (b *bed) accounts() *nodeservice.Accounts {
	b.t.Helper()
	sys, err := nodeservice.DialSystem(b.a, []string{b.url}, false, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(sys.Close)
	return &nodeservice.Accounts{A: b.a, Sys: sys, Now: time.Now}
}

// client is an operator's client with a fixed clock.
func (b *bed) client(now time.Time) *Client {
	b.t.Helper()
	c, err := NewClient(b.nc, testMesh)
	if err != nil {
		b.t.Fatal(err)
	}
	c.Now = func() time.Time { return now }
	c.Key, c.Operator = b.a.DeclarationKey(), "tester@bed"
	return c
}

// node is a connection with a node's enrolled credentials, as mesh-host
// would make it: replies come to the node's own inbox. Every asynchronous
// error the broker reports is kept in errs.
type node struct {
	name  string
	creds string // its credentials file, for the stock nats CLI
	ca    string // the mesh's CA, for the same
	url   string
	// trust is the signing key its token carried.
	trust string
	nc    *nats.Conn
	js    jetstream.JetStream // the control side's, to look at the stream
	mu    sync.Mutex
	errs  []error
}

// node connects as name with credentials signed as an enrolment signs
// them, for a key made here (the enrolment itself is enrol_test.go's).
func (b *bed) node(name string) *node {
	b.t.Helper()
	creds := b.nodeCreds(name, time.Hour)
	ca := filepath.Join(b.t.TempDir(), name+"-ca.pem")
	if err := os.WriteFile(ca, b.a.CAPEM(), 0o600); err != nil {
		b.t.Fatal(err)
	}
	n := &node{name: name, creds: creds, ca: ca, url: b.url, js: b.js, trust: b.a.SigningKey()}
	var err error
	n.nc, err = nats.Connect(b.url,
		nats.UserCredentials(creds),
		nats.RootCAs(ca),
		nats.CustomInboxPrefix(linkproto.InboxPrefix(testMesh, name)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			n.mu.Lock()
			n.errs = append(n.errs, err)
			n.mu.Unlock()
		}),
	)
	if err != nil {
		b.t.Fatalf("node %s connects with its credentials: %v", name, err)
	}
	b.t.Cleanup(n.nc.Close)
	return n
}

// nodeCreds writes a credentials file for node: a key made here and its
// JWT signed by the authority, valid for ttl.
func (b *bed) nodeCreds(name string, ttl time.Duration) string {
	b.t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	token, _, err := b.a.NodeJWT(name, pub, time.Now(), ttl)
	if err != nil {
		b.t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		b.t.Fatal(err)
	}
	path := filepath.Join(b.t.TempDir(), name+".creds")
	if err := os.WriteFile(path, creds, 0o600); err != nil {
		b.t.Fatal(err)
	}
	return path
}

// violation waits for the broker to report a permissions violation that
// names subject to n.
func (n *node) violation(t *testing.T, subject string) {
	t.Helper()
	basetest.Eventually(t, 5*time.Second, func() error {
		n.mu.Lock()
		defer n.mu.Unlock()
		for _, err := range n.errs {
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "Permissions Violation") && strings.Contains(err.Error(), fmt.Sprintf("%q", subject)) {
				return nil
			}
		}
		return fmt.Errorf("no permissions violation for %q reported to %s; errors: %v", subject, n.name, n.errs)
	})
}

// noErrors checks that the broker reported nothing to n: its own subjects
// are allowed.
func (n *node) noErrors(t *testing.T) {
	t.Helper()
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.errs) > 0 {
		t.Errorf("%s got errors on its own subjects: %v", n.name, n.errs)
	}
}

// publishEvent sends a journal record upward as the node does (on the
// record's own subject, no headers, no reply subject: the stream sends no
// acknowledgements) and waits until the events stream holds it.
func (n *node) publishEvent(t *testing.T, r event.Record) {
	t.Helper()
	body, err := linkproto.EventBody(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.nc.Publish(linkproto.EventSubject(testMesh, n.name, r.Seq), body); err != nil {
		t.Fatalf("%s publishes record %d: %v", n.name, r.Seq, err)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		if n.stored(t, r.Seq) == 0 {
			return fmt.Errorf("the events stream does not hold %s's record %d", n.name, r.Seq)
		}
		return nil
	})
}

// stored counts the messages of the events stream holding n's record seq.
func (n *node) stored(t *testing.T, seq uint64) int {
	t.Helper()
	count := 0
	for _, s := range n.history(t) {
		if s == seq {
			count++
		}
	}
	return count
}

// history is the journal sequences of n's records in the events stream,
// in stream order, each read from its subject; a body naming another
// record than its subject fails the test.
func (n *node) history(t *testing.T) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := n.js.OrderedConsumer(ctx, linkproto.EventsStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{linkproto.NodeEvents(testMesh, n.name)}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for left := info.NumPending; left > 0; {
		batch, err := c.FetchNoWait(int(min(left, 256)))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			r, err := subjectRecord(m.Subject(), m.Data())
			if err != nil {
				t.Errorf("%s's events: %v", n.name, err)
				continue
			}
			seqs = append(seqs, r.Seq)
		}
		if got == 0 {
			break
		}
		left -= uint64(got)
	}
	return seqs
}

// hello says hello as the node does and returns the welcome, or an error
// when none comes within timeout.
func (n *node) hello(revision uint64, timeout time.Duration) (*linkproto.Welcome, error) {
	h := linkproto.Hello{Protocol: linkproto.ProtocolVersion, Node: n.name, Version: "test", Revision: revision, Nonce: linkproto.NewNonce()}
	reply, err := n.nc.Request(linkproto.HelloSubject(testMesh, n.name), linkproto.Marshal(h), timeout)
	if err != nil {
		return nil, err
	}
	var w linkproto.Welcome
	if err := linkproto.Decode(reply.Data, linkproto.MaxDeclarationSize, &w); err != nil {
		return nil, err
	}
	// As the host does: the welcome is signed for this hello, and its
	// declaration by the mesh.
	if err := w.Verify(n.trust, testMesh, n.name, h.Nonce); err != nil {
		return nil, err
	}
	if w.Declaration != nil {
		if err := w.Declaration.Verify(n.trust); err != nil {
			return nil, err
		}
	}
	return &w, nil
}

// tlsOpt is how a client trusts the bed's broker: by the mesh's CA alone.
func (b *bed) tlsOpt() nats.Option {
	tc, err := b.a.ClientTLS()
	if err != nil {
		b.t.Fatal(err)
	}
	return nats.Secure(tc)
}

// testSealKey is a node's public sealing key, as enrolment presents it.
func testSealKey(t testing.TB) string {
	k, err := nkeys.CreateCurveKeys()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := k.PublicKey()
	return pub
}

// decl parses a declaration written for the tests.
func decl(t *testing.T, node string, revision uint64, motd string) *declaration.Declaration {
	t.Helper()
	src := fmt.Sprintf("mesh: %s\nnode: %s\nrevision: %d\nresources:\n  - file: {path: /etc/motd, content: %q}\n", testMesh, node, revision, motd)
	d, err := declaration.ParseYAML(node+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// mustKV opens the desired-state bucket as the control user.
func mustKV(t *testing.T, b *bed) jetstream.KeyValue {
	t.Helper()
	kv, err := b.js.KeyValue(context.Background(), linkproto.DesiredBucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// heartbeat publishes hb as n does.
func (n *node) heartbeat(t *testing.T, hb linkproto.Heartbeat) {
	t.Helper()
	hb.Protocol, hb.Mesh, hb.Node = linkproto.ProtocolVersion, testMesh, n.name
	data := linkproto.Marshal(hb)
	subject := linkproto.HeartbeatSubject(testMesh, n.name)
	if err := n.nc.Publish(subject, data); err != nil {
		t.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The broker has it; the stream stores it a moment later. A read
	// right after would find the one before.
	ctx := context.Background()
	stream, err := n.js.Stream(ctx, linkproto.HeartbeatsStream)
	if err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 10*time.Second, func() error {
		m, err := stream.GetLastMsgForSubject(ctx, subject)
		if err != nil {
			return err
		}
		if !bytes.Equal(m.Data, data) {
			return errors.New("the stream's last heartbeat is an earlier one")
		}
		return nil
	})
}

// kv opens a bucket as the control user.
func (b *bed) kv(bucket string) jetstream.KeyValue {
	b.t.Helper()
	kv, err := b.js.KeyValue(context.Background(), bucket)
	if err != nil {
		b.t.Fatal(err)
	}
	return kv
}

func userClaims(t *testing.T, creds []byte) *jwt.UserClaims {
	t.Helper()
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	return claims
}

// storedPush is the push stored for node, nil for none, read as the
// control service reads it for a hello.
func (b *bed) storedPush(ctx context.Context, node string) (*linkproto.Declaration, error) {
	b.t.Helper()
	desired, err := store.New(b.js).Desired(ctx, testMesh)
	if err != nil {
		return nil, err
	}
	return desired.Push(ctx, node)
}
