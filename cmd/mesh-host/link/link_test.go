package link

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// testKey is the mesh's declaration key in these tests; otherKey is a key
// the node does not trust.
var testKey, otherKey = mustSigningKey(), mustSigningKey()

func mustSigningKey() nkeys.KeyPair {
	kp, err := linkproto.NewSigningKey()
	if err != nil {
		panic(err)
	}
	return kp
}

func publicKey(kp nkeys.KeyPair) string {
	pub, _ := kp.PublicKey()
	return pub
}

const (
	testMesh = "lab"
	testNode = "web-1"
	// wait bounds every poll of these tests.
	wait = 20 * time.Second
)

// runServer starts a JetStream broker on port (-1 for any) keeping its
// store in dir, and stops it at cleanup.
func runServer(t *testing.T, dir string, port int) *server.Server {
	t.Helper()
	return basetest.NATS(t, &server.Options{Port: port, JetStream: true, StoreDir: dir, MaxPayload: 16 << 20})
}

func serverPort(t testing.TB, s *server.Server) int {
	t.Helper()
	return s.Addr().(*net.TCPAddr).Port
}

func openJournal(t testing.TB, path string) *journal.Journal {
	t.Helper()
	j, err := journal.Open(path, journal.Options{Fold: new(projector.Stored).Fold, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// testHost accepts any newer revision and journals it, as the real host
// does in short.
type testHost struct {
	j  *journal.Journal
	mu sync.Mutex
	// triggers records the trigger of every Accept.
	triggers []event.Trigger
	// planGate, when not nil, holds every Plan until it is closed.
	planGate chan struct{}
	// stateReads counts State calls.
	stateReads atomic.Int32
}

func (h *testHost) Accept(_ context.Context, d *linkproto.Declaration, trigger event.Trigger) linkproto.Ack {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.triggers = append(h.triggers, trigger)
	s, err := h.State()
	if err != nil {
		return linkproto.Ack{Reason: err.Error()}
	}
	if s.Desired != nil && d.Revision <= s.Desired.Revision {
		reason := fmt.Sprintf("revision %d is not newer than %d", d.Revision, s.Desired.Revision)
		h.j.Append(event.New(event.DeclarationRefused, 0, "", event.DeclarationRefusedPayload{Revision: d.Revision, Source: "push", Reason: reason}))
		return linkproto.Ack{Reason: reason}
	}
	recs, err := h.j.Append(event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{
		Revision: d.Revision, Digest: "sha256:test", Source: "push", Document: d.Document,
	}))
	if err != nil {
		return linkproto.Ack{Reason: err.Error()}
	}
	return linkproto.Ack{Accepted: true, Seq: recs[0].Seq}
}

func (h *testHost) Head() (uint64, error) {
	in, err := h.j.Info()
	return in.Head, err
}

func (h *testHost) State() (projector.State, error) {
	h.stateReads.Add(1)
	var s projector.State
	err := h.j.Projection(func(v journal.View, _ uint64) error {
		var err error
		s, err = projector.Load(v)
		return err
	})
	return s, err
}

// Plan answers with one step and journals plan.answered, as the real host
// does in short; while planGate is set it waits on it first.
func (h *testHost) Plan(ctx context.Context, p *linkproto.PlanRequest) linkproto.PlanAnswer {
	if h.planGate != nil {
		select {
		case <-h.planGate:
		case <-ctx.Done():
			return linkproto.PlanAnswer{Refused: ctx.Err().Error()}
		}
	}
	recs, err := h.j.Append(event.New(event.PlanAnswered, 0, "", event.PlanAnsweredPayload{Revision: p.Revision, Operator: p.Operator, Create: 1}))
	if err != nil {
		return linkproto.PlanAnswer{Refused: err.Error()}
	}
	return linkproto.PlanAnswer{Steps: []linkproto.PlanStep{{ID: "file:/etc/motd", Action: event.ActionCreate}}, Seq: recs[0].Seq}
}

func (h *testHost) accepted() []event.Trigger {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]event.Trigger(nil), h.triggers...)
}

type bed struct {
	t    *testing.T
	srv  *server.Server
	dir  string // the broker's store
	j    *journal.Journal
	host *testHost
	link *Link
	stop func()     // stops the link and waits for it; idempotent
	nc   *nats.Conn // a client of the control plane's side
}

// newBed starts a broker, a journal and (unless configure says otherwise
// before it starts) a link; configure may change the config.
func newBed(t *testing.T, configure func(*bed, *Config)) *bed {
	t.Helper()
	b := &bed{t: t, dir: t.TempDir()}
	b.srv = runServer(t, b.dir, -1)
	b.j = openJournal(t, t.TempDir()+"/journal.db")
	b.host = &testHost{j: b.j}
	b.nc = b.connect()
	cfg := Config{
		// These tests are of the link, not of TLS (tls_test.go is).
		Mesh: testMesh, Node: testNode, URLs: []string{b.srv.ClientURL()}, Version: "v-test", AllowPlaintext: true, Trust: publicKey(testKey),
		HeartbeatInterval: time.Hour, HelloTimeout: 200 * time.Millisecond,
		ReconnectMin: 50 * time.Millisecond, ReconnectMax: 500 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if configure != nil {
		configure(b, &cfg)
	}
	b.start(cfg)
	return b
}

func (b *bed) connect() *nats.Conn {
	b.t.Helper()
	nc, err := nats.Connect(b.srv.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(nc.Close)
	return nc
}

func (b *bed) start(cfg Config) {
	b.t.Helper()
	l, err := New(cfg, b.host, b.j)
	if err != nil {
		b.t.Fatal(err)
	}
	b.link = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	var once sync.Once
	b.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					b.t.Errorf("Run: %v", err)
				}
			case <-time.After(wait):
				b.t.Error("Run did not return after its context ended")
			}
		})
	}
	b.t.Cleanup(b.stop)
}

// testWriter sends the link's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// records returns the journal's records of kind k (all when empty).
func (b *bed) records(k event.Kind) []event.Record {
	b.t.Helper()
	var out []event.Record
	if err := b.j.Scan(1, 0, func(r event.Record) error {
		if k == "" || r.Kind == k {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		b.t.Fatal(err)
	}
	return out
}

func (b *bed) waitUp() {
	b.t.Helper()
	eventually(b.t, "link.up journaled", func() bool { return len(b.records(event.LinkUp)) > 0 })
}

// push sends data as a declaration push and returns the Ack. It retries
// while the link's subscription is not yet known to the broker.
func (b *bed) push(data []byte) linkproto.Ack {
	b.t.Helper()
	var m *nats.Msg
	eventually(b.t, "an answer to a push", func() bool {
		var err error
		m, err = b.nc.Request(linkproto.DeclarationSubject(testMesh, testNode), data, 5*time.Second)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			b.t.Fatalf("push: %v", err)
		}
		return err == nil
	})
	var ack linkproto.Ack
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &ack); err != nil {
		b.t.Fatalf("ack: %v: %s", err, m.Data)
	}
	return ack
}

// declaration is revision rev, signed by the mesh's key.
func declaration(rev uint64) linkproto.Declaration {
	doc := fmt.Sprintf(`{"mesh":%q,"node":%q,"revision":%d,"resources":[]}`, testMesh, testNode, rev)
	d := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: testNode, Revision: rev, Document: json.RawMessage(doc), Operator: "tester"}
	if err := d.Sign(testKey); err != nil {
		panic(err)
	}
	return d
}

func TestPushAccepted(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	ack := b.push(linkproto.Marshal(declaration(4)))
	if !ack.Accepted || ack.Seq == 0 || ack.Revision != 4 || ack.Node != testNode || ack.Protocol != linkproto.ProtocolVersion {
		t.Fatalf("got %+v, want accepted revision 4 with a seq", ack)
	}
	r, ok, err := b.j.Get(ack.Seq)
	if err != nil || !ok || r.Kind != event.DeclarationReceived {
		t.Fatalf("record %d: got %v %v %v, want declaration.received", ack.Seq, r.Kind, ok, err)
	}
	if got := b.host.accepted(); len(got) != 1 || got[0] != event.TriggerPushed {
		t.Errorf("got triggers %v, want [pushed]", got)
	}
	// The host's refusal travels back as it is.
	ack = b.push(linkproto.Marshal(declaration(3)))
	if ack.Accepted || !strings.Contains(ack.Reason, "not newer") {
		t.Errorf("got %+v, want refused as not newer", ack)
	}
}

func TestBadMessagesRefused(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	garbage := make([]byte, 1<<20)
	rand.Read(garbage)
	with := func(f func(*linkproto.Declaration)) []byte {
		d := declaration(7)
		f(&d)
		return linkproto.Marshal(d)
	}
	corpus := []struct {
		name, data, reason string
	}{
		{"not JSON", "this is not json", "malformed"},
		{"oversized", `{"protocol":1,"document":"` + strings.Repeat("x", linkproto.MaxDeclarationSize) + `"}`, "too large"},
		{"protocol 0", string(with(func(d *linkproto.Declaration) { d.Protocol = 0 })), "no protocol field"},
		{"protocol 99", string(with(func(d *linkproto.Declaration) { d.Protocol = 99 })), "protocol 99 is newer"},
		{"wrong node", string(with(func(d *linkproto.Declaration) { d.Node = "web-2" })), "another node"},
		{"wrong mesh", string(with(func(d *linkproto.Declaration) { d.Mesh = "prod" })), "another node"},
		{"no revision", string(with(func(d *linkproto.Declaration) { d.Revision = 0 })), "revision"},
		{"no document", string(with(func(d *linkproto.Declaration) { d.Document = nil })), "document"},
		{"huge garbage", string(garbage), "malformed"},
		{"JSON of another type", `[1,2,3]`, "malformed"},
	}
	for _, c := range corpus {
		ack := b.push([]byte(c.data))
		if ack.Accepted || !strings.Contains(ack.Reason, c.reason) || ack.Node != testNode {
			t.Errorf("%s: got %+v, want refused: %s", c.name, ack, c.reason)
		}
		if len(ack.Reason) > maxReason+len("…") {
			t.Errorf("%s: the reason is %d bytes", c.name, len(ack.Reason))
		}
	}
	refused := b.records(event.LinkRefused)
	if len(refused) != len(corpus) {
		t.Fatalf("got %d link.refused records, want %d", len(refused), len(corpus))
	}
	for i, r := range refused {
		var p event.LinkRefusedPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Subject != linkproto.DeclarationSubject(testMesh, testNode) || p.Bytes != len(corpus[i].data) || !strings.Contains(p.Reason, corpus[i].reason) {
			t.Errorf("%s: got %+v", corpus[i].name, p)
		}
	}
	if len(b.host.accepted()) != 0 {
		t.Errorf("the host was handed %v", b.host.accepted())
	}
	// The link works on.
	if ack := b.push(linkproto.Marshal(declaration(8))); !ack.Accepted {
		t.Fatalf("after the corpus: got %+v, want accepted", ack)
	}
}

// TestForgedDeclarationsRefused is the broker turned attacker: whatever it
// pushes that the mesh did not sign, as it is, is refused by name and
// journaled as link.refused, and the host is never handed it.
func TestForgedDeclarationsRefused(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	good := declaration(7)
	corpus := []struct {
		name   string
		d      linkproto.Declaration
		reason string
	}{
		{"unsigned", func() linkproto.Declaration { d := good; d.Signer, d.Signature = "", ""; return d }(), "unsigned"},
		{"signed by another key", func() linkproto.Declaration {
			d := good
			if err := d.Sign(otherKey); err != nil {
				t.Fatal(err)
			}
			return d
		}(), "does not trust"},
		{"another key, named as the mesh's", func() linkproto.Declaration {
			d := good
			d.Sign(otherKey)
			d.Signer = publicKey(testKey)
			return d
		}(), "bad signature"},
		{"document changed", func() linkproto.Declaration {
			d := good
			d.Document = json.RawMessage(strings.Replace(string(d.Document), `"resources":[]`, `"resources":[{"file":{"path":"/etc/x","content":"x"}}]`, 1))
			return d
		}(), "bad signature"},
		{"revision raised", func() linkproto.Declaration { d := good; d.Revision = 8; return d }(), "bad signature"},
		{"operator changed", func() linkproto.Declaration { d := good; d.Operator = "mallory"; return d }(), "bad signature"},
		{"signature garbage", func() linkproto.Declaration { d := good; d.Signature = "!!!"; return d }(), "does not decode"},
		{"another node's, signed", func() linkproto.Declaration {
			d := good
			d.Node = "web-2"
			d.Sign(testKey)
			return d
		}(), "another node"},
	}
	for _, c := range corpus {
		ack := b.push(linkproto.Marshal(c.d))
		if ack.Accepted || !strings.Contains(ack.Reason, c.reason) {
			t.Errorf("%s: got %+v, want refused: %s", c.name, ack, c.reason)
		}
	}
	if got := b.host.accepted(); len(got) != 0 {
		t.Fatalf("the host was handed %d forged declarations", len(got))
	}
	if n := len(b.records(event.LinkRefused)); n != len(corpus) {
		t.Errorf("got %d link.refused records, want %d", n, len(corpus))
	}
	if ack := b.push(linkproto.Marshal(good)); !ack.Accepted {
		t.Fatalf("the signed declaration: got %+v, want accepted", ack)
	}
}

// TestForgedWelcomesIgnored: a welcome the mesh did not sign for this very
// hello (unsigned, another key, or an old one replayed) is refused whole:
// its declaration is not accepted and its events mark is not believed.
func TestForgedWelcomesIgnored(t *testing.T) {
	var replay atomic.Pointer[linkproto.Welcome]
	for _, c := range []struct {
		name  string
		forge func(h linkproto.Hello) linkproto.Welcome
	}{
		{"unsigned", func(h linkproto.Hello) linkproto.Welcome {
			d := declaration(5)
			return linkproto.Welcome{Protocol: linkproto.ProtocolVersion, Declaration: &d, EventsThrough: 40, Nonce: h.Nonce}
		}},
		{"another key", func(h linkproto.Hello) linkproto.Welcome {
			d := declaration(5)
			w := linkproto.Welcome{Protocol: linkproto.ProtocolVersion, Declaration: &d, EventsThrough: 40, Nonce: h.Nonce}
			w.Sign(otherKey, testMesh, testNode)
			return w
		}},
		{"replayed", func(h linkproto.Hello) linkproto.Welcome {
			if w := replay.Load(); w != nil {
				return *w
			}
			d := declaration(5)
			w := linkproto.Welcome{Protocol: linkproto.ProtocolVersion, Declaration: &d, EventsThrough: 40, Nonce: "an older hello's"}
			w.Sign(testKey, testMesh, testNode)
			return w
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			hellos := make(chan linkproto.Hello, 10)
			b := newBed(t, func(b *bed, _ *Config) {
				appendRecords(t, b.j, 50)
				controlResponder(t, b.nc, hellos, c.forge)
			})
			b.waitUp()
			eventually(t, "the welcome refused", func() bool {
				for _, r := range b.records(event.LinkRefused) {
					if strings.Contains(string(r.Payload), "welcome") {
						return true
					}
				}
				return false
			})
			if got := b.host.accepted(); len(got) != 0 {
				t.Errorf("the host was handed the welcome's declaration")
			}
			if b.link.Acked() != 0 {
				t.Errorf("the forged welcome's events mark was believed: acked %d", b.link.Acked())
			}
		})
	}
}

func TestRefusalsRateLimited(t *testing.T) {
	var now atomic.Pointer[time.Time]
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now.Store(&start)
	b := newBed(t, func(_ *bed, c *Config) { c.Now = func() time.Time { return *now.Load() } })
	b.waitUp()
	for range 25 {
		if ack := b.push([]byte("nope")); ack.Accepted {
			t.Fatal("accepted garbage")
		}
	}
	if got := len(b.records(event.LinkRefused)); got != refusalsPerMinute {
		t.Fatalf("got %d link.refused records in a minute, want %d", got, refusalsPerMinute)
	}
	later := start.Add(time.Minute)
	now.Store(&later)
	b.push([]byte("nope"))
	refused := b.records(event.LinkRefused)
	if len(refused) != refusalsPerMinute+1 {
		t.Fatalf("got %d link.refused records, want %d", len(refused), refusalsPerMinute+1)
	}
	var p event.LinkRefusedPayload
	json.Unmarshal(refused[len(refused)-1].Payload, &p)
	if p.Suppressed != 15 {
		t.Errorf("got suppressed %d, want 15", p.Suppressed)
	}
}

// controlResponder answers hellos as a control service would, with a
// welcome made by welcome from the hello.
func controlResponder(t *testing.T, nc *nats.Conn, hellos chan<- linkproto.Hello, welcome func(linkproto.Hello) linkproto.Welcome) *nats.Subscription {
	t.Helper()
	sub, err := nc.QueueSubscribe(linkproto.AllHellos(testMesh), linkproto.ControlQueue, func(m *nats.Msg) {
		var h linkproto.Hello
		if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &h); err != nil {
			t.Errorf("hello: %v", err)
			return
		}
		select {
		case hellos <- h:
		default:
		}
		w := welcome(h)
		// A welcome made with a nonce is the test's own (a forgery);
		// any other is signed as the control service signs.
		if w.Nonce == "" {
			w.Nonce = h.Nonce
			if err := w.Sign(testKey, testMesh, testNode); err != nil {
				t.Error(err)
			}
		}
		m.Respond(linkproto.Marshal(w))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return sub
}

func TestHelloAppliesDeclaration(t *testing.T) {
	hellos := make(chan linkproto.Hello, 10)
	b := newBed(t, func(b *bed, _ *Config) {
		// A declaration accepted before: the hello reports it.
		d := declaration(2)
		b.host.Accept(context.Background(), &d, event.TriggerPushed)
		controlResponder(t, b.nc, hellos, func(linkproto.Hello) linkproto.Welcome {
			d := declaration(5)
			return linkproto.Welcome{Protocol: linkproto.ProtocolVersion, Declaration: &d}
		})
	})
	select {
	case h := <-hellos:
		if h.Node != testNode || h.Version != "v-test" || h.Revision != 2 || h.Head == 0 || h.Protocol != linkproto.ProtocolVersion {
			t.Errorf("got hello %+v", h)
		}
	case <-time.After(wait):
		t.Fatal("no hello")
	}
	eventually(t, "the welcome's declaration accepted", func() bool {
		s, _ := b.host.State()
		return s.Desired != nil && s.Desired.Revision == 5
	})
	if got := b.host.accepted(); len(got) != 2 || got[1] != event.TriggerReconnect {
		t.Errorf("got triggers %v, want [pushed reconnect]", got)
	}
}

func TestHelloRetriedUntilAnswered(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	// Nobody answered the first hello; a control service turns up.
	controlResponder(t, b.nc, make(chan linkproto.Hello), func(linkproto.Hello) linkproto.Welcome {
		d := declaration(9)
		return linkproto.Welcome{Protocol: linkproto.ProtocolVersion, Declaration: &d}
	})
	eventually(t, "the declaration of a later welcome accepted", func() bool {
		s, _ := b.host.State()
		return s.Desired != nil && s.Desired.Revision == 9
	})
}

func TestOfflineAtStart(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	j := openJournal(t, t.TempDir()+"/journal.db")
	b := &bed{t: t, j: j, host: &testHost{j: j}, dir: t.TempDir()}
	b.start(Config{Mesh: testMesh, Node: testNode, URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", port)}, AllowPlaintext: true, Trust: publicKey(testKey),
		ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, HelloTimeout: 100 * time.Millisecond})
	if n := len(b.records(event.LinkUp)); n != 0 {
		t.Fatalf("link.up with no broker")
	}
	b.srv = runServer(t, b.dir, port)
	b.waitUp()
}

func TestHeartbeats(t *testing.T) {
	beats := make(chan linkproto.Heartbeat, 10)
	b := newBed(t, func(b *bed, _ *Config) {
		sub, err := b.nc.Subscribe(linkproto.HeartbeatSubject(testMesh, testNode), func(m *nats.Msg) {
			var h linkproto.Heartbeat
			if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &h); err != nil {
				t.Errorf("heartbeat: %v", err)
			}
			beats <- h
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
		b.nc.Flush()
	})
	next := func(what string) linkproto.Heartbeat {
		t.Helper()
		select {
		case h := <-beats:
			return h
		case <-time.After(wait):
			t.Fatalf("no heartbeat %s", what)
		}
		panic("unreachable")
	}
	next("on link up")
	b.link.Reconciled()
	h := next("after a reconcile")
	head, _ := b.j.Info()
	if h.Mesh != testMesh || h.Node != testNode || h.Version != "v-test" || time.Duration(h.Interval) != time.Hour ||
		h.Head == 0 || h.Head > head.Head || h.Sent.IsZero() || h.Protocol != linkproto.ProtocolVersion {
		t.Errorf("got %+v", h)
	}
	select {
	case h := <-beats:
		t.Errorf("a heartbeat nobody asked for: %+v", h)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestHeartbeatWhileIdle(t *testing.T) {
	b := newBed(t, func(_ *bed, c *Config) { c.HeartbeatInterval = 50 * time.Millisecond })
	var n atomic.Int32
	sub, err := b.nc.Subscribe(linkproto.HeartbeatSubject(testMesh, testNode), func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	eventually(t, "three idle heartbeats", func() bool { return n.Load() >= 3 })
}

// An idle heartbeat reads the journal's head, not the whole projection:
// the state is read again, and its Report sent, only once a record moved
// the head.
func TestIdleHeartbeatReadsTheStateOnlyWhenItMoves(t *testing.T) {
	b := newBed(t, func(_ *bed, c *Config) { c.HeartbeatInterval = 20 * time.Millisecond })
	beats, reports := make(chan linkproto.Heartbeat, 100), make(chan linkproto.Report, 100)
	for subject, fn := range map[string]func(m *nats.Msg){
		linkproto.HeartbeatSubject(testMesh, testNode): func(m *nats.Msg) {
			var h linkproto.Heartbeat
			if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &h); err != nil {
				t.Errorf("heartbeat: %v", err)
			}
			beats <- h
		},
		linkproto.StateSubject(testMesh, testNode): func(m *nats.Msg) {
			var r linkproto.Report
			if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &r); err != nil {
				t.Errorf("report: %v", err)
			}
			reports <- r
		},
	} {
		sub, err := b.nc.Subscribe(subject, fn)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	next := func() linkproto.Heartbeat {
		t.Helper()
		select {
		case h := <-beats:
			return h
		case <-time.After(wait):
			t.Fatal("no heartbeat")
		}
		panic("unreachable")
	}
	// Settled: two heartbeats in a row name the journal's head.
	for {
		h1, h2 := next(), next()
		in, _ := b.j.Info()
		if h1.Head == h2.Head && h2.Head == in.Head {
			break
		}
	}
	for len(reports) > 0 {
		<-reports
	}
	reads := b.host.stateReads.Load()
	for range 5 {
		if h := next(); h.Report == "" {
			t.Errorf("an idle heartbeat names no report: %+v", h)
		}
	}
	if got := b.host.stateReads.Load(); got != reads {
		t.Errorf("5 idle heartbeats read the state %d times, want 0", got-reads)
	}
	if len(reports) != 0 {
		t.Errorf("idle heartbeats sent %d reports, want none", len(reports))
	}

	recs, err := b.j.Append(event.New(event.DeclarationRefused, 0, "", event.DeclarationRefusedPayload{Revision: 1, Source: "push", Reason: "test"}))
	if err != nil {
		t.Fatal(err)
	}
	for h := next(); h.Head != recs[0].Seq; h = next() {
	}
	if got := b.host.stateReads.Load(); got != reads+1 {
		t.Errorf("the head moved once and the state was read %d times, want 1", got-reads)
	}
	select {
	case r := <-reports:
		if r.State.Head != recs[0].Seq {
			t.Errorf("the report says head %d, want %d", r.State.Head, recs[0].Seq)
		}
	case <-time.After(wait):
		t.Error("no report once the state moved")
	}
}

// streamRecords reads the events stream: the journal sequences it holds,
// each read from its subject and checked against its body.
func streamRecords(t *testing.T, url string) []uint64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := js.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for i := info.State.FirstSeq; i <= info.State.LastSeq && info.State.Msgs > 0; i++ {
		m, err := st.GetMsg(ctx, i)
		if err != nil {
			t.Fatalf("stream message %d: %v", i, err)
		}
		mesh, node, seq, err := linkproto.ParseEventSubject(m.Subject)
		if err != nil || mesh != testMesh || node != testNode {
			t.Fatalf("stream message %d: subject %q: %v", i, m.Subject, err)
		}
		if len(m.Header) != 0 {
			t.Errorf("stream message %d: headers %v, want none (the subject says which record it is)", i, m.Header)
		}
		var r event.Record
		if err := json.Unmarshal(m.Data, &r); err != nil || r.Seq != seq {
			t.Errorf("stream message %d: body says %d (%v), header %d", i, r.Seq, err, seq)
		}
		seqs = append(seqs, seq)
	}
	return seqs
}

func createEventsStream(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: linkproto.EventsStream, Subjects: []string{linkproto.AnyMeshEvents}, Storage: jetstream.FileStorage, NoAck: true,
		// As meshctl's: one message per record subject, the rest refused.
		MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true,
	}); err != nil {
		t.Fatal(err)
	}
}

// syncResponder answers the node's syncs as a control service does: with
// the last of its records the events stream holds. Its connection
// reconnects (and resubscribes) across a broker restart.
func syncResponder(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nc.QueueSubscribe(linkproto.AllSyncs(testMesh), linkproto.ControlQueue, func(m *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		var through uint64
		st, err := js.Stream(ctx, linkproto.EventsStream)
		if err != nil {
			return // the broker is restarting: the node asks again
		}
		last, err := st.GetLastMsgForSubject(ctx, linkproto.NodeEvents(testMesh, testNode))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return
		default:
			_, _, through, _ = linkproto.ParseEventSubject(last.Subject)
		}
		var q linkproto.Sync
		if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &q); err != nil {
			t.Errorf("sync: %v", err)
			return
		}
		answer := linkproto.Synced{Protocol: linkproto.ProtocolVersion, EventsThrough: through, Nonce: q.Nonce}
		if err := answer.Sign(testKey, testMesh, testNode); err != nil {
			t.Error(err)
		}
		m.Respond(linkproto.Marshal(answer))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// exactlyOnce checks that the stream holds records 1..head of the journal,
// each once, in order.
func exactlyOnce(t *testing.T, seqs []uint64, head uint64) {
	t.Helper()
	if uint64(len(seqs)) != head {
		t.Errorf("the stream holds %d records, the journal %d", len(seqs), head)
	}
	for i, s := range seqs {
		if s != uint64(i+1) {
			t.Fatalf("stream message %d is record %d, want %d (a gap or a duplicate)", i+1, s, i+1)
		}
	}
}

// appendRecords appends n records, in batches of 50 so that many are in
// flight at once.
func appendRecords(t *testing.T, j *journal.Journal, n int) {
	t.Helper()
	for n > 0 {
		var batch []event.Record
		for i := 0; i < 50 && n > 0; i, n = i+1, n-1 {
			batch = append(batch, event.New(event.DriftObserved, 0, fmt.Sprintf("file:/etc/f%d", n), event.DriftObservedPayload{Differs: []string{"content"}}))
		}
		if _, err := j.Append(batch...); err != nil {
			t.Error(err)
			return
		}
	}
}

func TestEventsExactlyOnceAcrossBrokerRestart(t *testing.T) {
	// It waits for the mark persisted.
	var url string
	b := newBed(t, func(b *bed, cfg *Config) {
		cfg.MarkEvery = time.Second
		url = b.srv.ClientURL()
		createEventsStream(t, url)
		syncResponder(t, b.nc)
		appendRecords(t, b.j, 300) // before the link starts
	})
	acked := func(want uint64) func() bool {
		return func() bool { in, _ := b.j.Info(); return b.link.Acked() >= want && in.Acked >= want }
	}
	head := func() uint64 { in, _ := b.j.Info(); return in.Head }
	eventually(t, "the first records acknowledged", acked(head()))
	exactlyOnce(t, streamRecords(t, url), head())

	// Restart the broker while records are being appended and sent.
	port := serverPort(t, b.srv)
	var wg sync.WaitGroup
	wg.Go(func() { appendRecords(t, b.j, 3000) })
	eventually(t, "sending under way", func() bool { return b.link.Acked() > 600 })
	b.srv.Shutdown()
	t.Logf("broker stopped with %d of %d records acknowledged", b.link.Acked(), head())
	b.srv.WaitForShutdown()
	eventually(t, "link.down journaled", func() bool { return len(b.records(event.LinkDown)) > 0 })
	appendRecords(t, b.j, 100) // while the link is down
	b.srv = runServer(t, b.dir, port)
	wg.Wait()
	eventually(t, "every record acknowledged after the restart", func() bool {
		return len(b.records(event.LinkUp)) >= 2 && acked(head())()
	})
	exactlyOnce(t, streamRecords(t, url), head())

	// The mark persists: a reopened journal says so.
	want := head()
	b.stop()
	path := b.j.Path()
	b.j.Close()
	in, _ := openJournal(t, path).Info()
	// Stopping journals one link.down more, which was not sent.
	if in.Acked != want || in.Head != want+1 {
		t.Errorf("reopened: acked %d, head %d; want acked %d, head %d", in.Acked, in.Head, want, want+1)
	}
}

func TestEventsStartWhereTheStreamHolds(t *testing.T) {
	b := newBed(t, func(b *bed, _ *Config) {
		createEventsStream(t, b.srv.ClientURL())
		syncResponder(t, b.nc)
		appendRecords(t, b.j, 50)
		controlResponder(t, b.nc, make(chan linkproto.Hello, 1), func(linkproto.Hello) linkproto.Welcome {
			return linkproto.Welcome{Protocol: linkproto.ProtocolVersion, EventsThrough: 40}
		})
	})
	in, _ := b.j.Info()
	eventually(t, "records acknowledged", func() bool { return b.link.Acked() >= in.Head })
	seqs := streamRecords(t, b.srv.ClientURL())
	if len(seqs) == 0 || seqs[0] != 41 {
		t.Errorf("the stream starts at %v, want 41 (the welcome said it holds 40)", seqs[:min(len(seqs), 1)])
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	j := openJournal(t, t.TempDir()+"/journal.db")
	h := &testHost{j: j}
	for _, c := range []Config{
		{Mesh: "Lab", Node: "n", URLs: []string{"nats://x"}},
		{Mesh: "lab", Node: "a.b", URLs: []string{"nats://x"}},
		{Mesh: "lab", Node: "n"},
		{Mesh: "lab", Node: "n", URLs: []string{"nats://x"}},
		{Mesh: "lab", Node: "n", URLs: []string{"nats://x"}, TLS: &tls.Config{}, AllowPlaintext: true},
	} {
		if _, err := New(c, h, j); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): got %v, want ErrConfig", c, err)
		}
	}
}

func TestBackoff(t *testing.T) {
	for attempt, want := range []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second} {
		for range 50 {
			got := backoff(attempt, 250*time.Millisecond, 30*time.Second)
			if got < want*8/10 || got > want*12/10 {
				t.Fatalf("attempt %d: got %v, want %v ±20%%", attempt, got, want)
			}
		}
	}
	if got := backoff(40, 250*time.Millisecond, 30*time.Second); got > 36*time.Second {
		t.Errorf("attempt 40: got %v, want at most 30s +20%%", got)
	}
}

func TestClip(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	if got := clip(s, 5); got != "éé…" {
		t.Errorf("got %q", got)
	}
	if got := clip("short", 10); got != "short" {
		t.Errorf("got %q", got)
	}
}

// TestEventsWaitForAControlPlane: with no control plane to say what the
// stream holds, nothing is sent (sending blind would resend what the
// stream holds and refuses); the journal keeps
// them, and they go up once a control plane answers.
func TestEventsWaitForAControlPlane(t *testing.T) {
	var url string
	b := newBed(t, func(b *bed, _ *Config) {
		url = b.srv.ClientURL()
		createEventsStream(t, url)
		appendRecords(t, b.j, 20)
	})
	b.waitUp()
	// Give a blind sender every chance to show itself.
	time.Sleep(500 * time.Millisecond)
	if seqs := streamRecords(t, url); len(seqs) != 0 {
		t.Fatalf("records %v sent with no control plane answering", seqs)
	}
	syncResponder(t, b.nc)
	in, _ := b.j.Info()
	eventually(t, "records acknowledged once a control plane answers", func() bool { return b.link.Acked() >= in.Head })
	exactlyOnce(t, streamRecords(t, url), in.Head)
}

// A few records journaled a little apart, as a push's are (received,
// started, the outcome), are asked about together: each sync costs the
// host a signature check and the control service a lookup and a
// signature, on the path of every push to a fleet.
func TestAFewRecordsAreAskedAboutTogether(t *testing.T) {
	var syncs atomic.Int64
	b := newBed(t, func(b *bed, _ *Config) {
		createEventsStream(t, b.srv.ClientURL())
		syncResponder(t, b.nc)
		if _, err := b.nc.Subscribe(linkproto.AllSyncs(testMesh), func(*nats.Msg) { syncs.Add(1) }); err != nil {
			t.Fatal(err)
		}
	})
	head := func() uint64 { in, _ := b.j.Info(); return in.Head }
	eventually(t, "the link's first records acknowledged", func() bool { return head() > 0 && b.link.Acked() >= head() })
	before := syncs.Load()
	for i := range 4 {
		if _, err := b.j.Append(event.New(event.DriftObserved, 0, fmt.Sprintf("file:/etc/f%d", i), event.DriftObservedPayload{Differs: []string{"content"}})); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	eventually(t, "the four records acknowledged", func() bool { return b.link.Acked() >= head() })
	// Asked every 50 ms, four records 100 ms apart took four syncs.
	if n := syncs.Load() - before; n > 2 {
		t.Errorf("four records journaled 100 ms apart took %d syncs, want at most 2", n)
	}
}

// A host that stops says so in a last heartbeat, which the broker has
// before the link closes; no heartbeat before it says so.
func TestLastHeartbeatSaysStopping(t *testing.T) {
	beats := make(chan linkproto.Heartbeat, 10)
	b := newBed(t, func(b *bed, _ *Config) {
		sub, err := b.nc.Subscribe(linkproto.HeartbeatSubject(testMesh, testNode), func(m *nats.Msg) {
			var h linkproto.Heartbeat
			if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &h); err != nil {
				t.Errorf("heartbeat: %v", err)
			}
			beats <- h
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sub.Unsubscribe() })
		b.nc.Flush()
	})
	select {
	case h := <-beats:
		if h.Stopping != "" {
			t.Errorf("the heartbeat on link up says stopping: %q", h.Stopping)
		}
	case <-time.After(wait):
		t.Fatal("no heartbeat on link up")
	}
	b.stop()
	select {
	case h := <-beats:
		if h.Stopping != "the host is stopping" || h.Node != testNode || h.Sent.IsZero() {
			t.Errorf("last heartbeat %+v, want one saying the host is stopping", h)
		}
	case <-time.After(wait):
		t.Fatal("no heartbeat as the host stopped")
	}
	if downs := b.records(event.LinkDown); len(downs) != 1 {
		t.Errorf("%d link.down journaled, want 1", len(downs))
	}
}
