package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// helloAnswered waits for the service to answer n's hello.
func helloAnswered(t *testing.T, n *node, revision uint64) *linkproto.Welcome {
	t.Helper()
	var w *linkproto.Welcome
	basetest.Eventually(t, 10*time.Second, func() error {
		var err error
		w, err = n.hello(revision, time.Second)
		return err
	})
	return w
}

func TestHelloWelcome(t *testing.T) {
	b := newBed(t)
	b.serve()
	a := b.node("a")
	ctx := context.Background()

	w := helloAnswered(t, a, 0)
	if w.Protocol != linkproto.ProtocolVersion || w.Declaration != nil || w.EventsThrough != 0 {
		t.Fatalf("welcome of a new node: %+v; want nothing stored", w)
	}

	for seq := uint64(1); seq <= 3; seq++ {
		r := event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: "test"})
		r.Seq, r.Time = seq, time.Now()
		a.publishEvent(t, r)
	}
	// Another node's records are not a's.
	other := b.node("b")
	r := event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: "test"})
	r.Seq, r.Time = 7, time.Now()
	other.publishEvent(t, r)

	if w := helloAnswered(t, a, 0); w.EventsThrough != 3 || w.Declaration != nil {
		t.Fatalf("welcome after three records: %+v; want events through 3", w)
	}

	d := decl(t, "a", 2, "hello\n")
	var out bytes.Buffer
	if err := b.client(time.Now()).Declare(ctx, &out, "a", d, DeclareOptions{PushTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	doc, _ := d.MarshalJSON()
	for _, tc := range []struct {
		accepted uint64
		want     bool
	}{{0, true}, {1, true}, {2, false}, {3, false}} {
		w := helloAnswered(t, a, tc.accepted)
		if got := w.Declaration != nil; got != tc.want {
			t.Errorf("hello with revision %d: declaration %v, want %v", tc.accepted, got, tc.want)
			continue
		}
		if !tc.want {
			continue
		}
		if err := w.Declaration.For(testMesh, "a"); err != nil || w.Declaration.Revision != 2 || !bytes.Equal(w.Declaration.Document, doc) || w.Declaration.Protocol != linkproto.ProtocolVersion {
			t.Errorf("hello with revision %d: declaration %+v (%v)", tc.accepted, w.Declaration, err)
		}
		if w.EventsThrough != 3 {
			t.Errorf("events through %d, want 3", w.EventsThrough)
		}
	}
}

func TestMalformedHelloIsNotAnswered(t *testing.T) {
	b := newBed(t)
	b.serve()
	a := b.node("a")
	helloAnswered(t, a, 0)
	subject := linkproto.HelloSubject(testMesh, "a")
	for _, tc := range []struct{ name, body string }{
		{"not JSON", "hello"},
		{"no protocol", `{"node":"a"}`},
		{"newer protocol", `{"protocol":99,"node":"a"}`},
		{"another node", `{"protocol":1,"node":"b"}`},
		{"data after", `{"protocol":1,"node":"a"}{}`},
		{"too large", `{"protocol":1,"node":"a","version":"` + string(bytes.Repeat([]byte("x"), linkproto.MaxReportSize)) + `"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := a.nc.Request(subject, []byte(tc.body), 200*time.Millisecond); !errors.Is(err, nats.ErrTimeout) {
				t.Fatalf("answered %v, %v; want no answer", m, err)
			}
		})
	}
	// And the service still answers.
	helloAnswered(t, a, 0)
}

func TestEnsureIsIdempotent(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	s := &nodeservice.Service{Conn: b.nc, Mesh: testMesh, Key: b.a.DeclarationKey(), Log: b.log}
	for range 2 {
		if err := s.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	events, err := b.js.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := events.CachedInfo().Config
	if cfg.MaxMsgsPerSubject != 1 || cfg.Discard != jetstream.DiscardNew || !cfg.DiscardNewPerSubject || cfg.AllowRollup ||
		cfg.MaxAge != 0 || len(cfg.Subjects) != 1 || cfg.Subjects[0] != linkproto.AnyMeshEvents {
		t.Errorf("events stream %+v", cfg)
	}
	hb, err := b.js.Stream(ctx, linkproto.HeartbeatsStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := hb.CachedInfo().Config; cfg.MaxMsgsPerSubject != 1 || cfg.Subjects[0] != linkproto.AnyMeshHeartbeats {
		t.Errorf("heartbeats stream %+v", cfg)
	}
	kv, err := b.js.KeyValue(ctx, linkproto.DesiredBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 16 {
		t.Errorf("desired bucket history %d, want 16", st.History())
	}
}

// TestHelloIsAnsweredOnlyToTheNodesInbox: a node cannot make the control
// service publish its answer anywhere else: not into another node's inbox,
// not into the JetStream API, where a Welcome sent to a delete subject
// would delete the events stream.
func TestHelloIsAnsweredOnlyToTheNodesInbox(t *testing.T) {
	b := newBed(t)
	b.serve()
	a := b.node("a")
	helloAnswered(t, a, 0)

	// What the control plane would receive if the service were fooled.
	elsewhere := []string{
		"$JS.API.STREAM.DELETE." + linkproto.EventsStream,
		linkproto.InboxPrefix(testMesh, "b") + ".stolen",
		linkproto.DeclarationSubject(testMesh, "b"),
	}
	got := make(chan string, 16)
	for _, subj := range elsewhere {
		sub, err := b.nc.Subscribe(subj, func(m *nats.Msg) { got <- m.Subject })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	hello := linkproto.Marshal(linkproto.Hello{Protocol: linkproto.ProtocolVersion, Node: "a", Version: "test"})
	for _, reply := range elsewhere {
		if err := a.nc.PublishMsg(&nats.Msg{Subject: linkproto.HelloSubject(testMesh, "a"), Reply: reply, Data: hello}); err != nil {
			t.Fatal(err)
		}
	}
	// A hello answered normally after them shows the service has read
	// them all (one subscription, in order).
	helloAnswered(t, a, 0)
	select {
	case subj := <-got:
		t.Errorf("the service published a welcome to %s", subj)
	default:
	}
	if _, err := b.js.Stream(context.Background(), linkproto.EventsStream); err != nil {
		t.Errorf("the events stream: %v", err)
	}
}

// TestSyncSaysHowMuchTheStreamHolds: a node's sync is answered, in its own
// inbox only, with the last of its records the events stream holds.
func TestSyncSaysHowMuchTheStreamHolds(t *testing.T) {
	b := newBed(t)
	b.serve()
	a := b.node("a")
	sync := func() (uint64, error) {
		nonce := linkproto.NewNonce()
		q := linkproto.Marshal(linkproto.Sync{Protocol: linkproto.ProtocolVersion, Node: "a", Nonce: nonce})
		m, err := a.nc.Request(linkproto.SyncSubject(testMesh, "a"), q, time.Second)
		if err != nil {
			return 0, err
		}
		var s linkproto.Synced
		if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &s); err != nil {
			return 0, err
		}
		if err := s.Verify(a.trust, testMesh, "a", nonce); err != nil {
			return 0, err
		}
		return s.EventsThrough, nil
	}
	basetest.Eventually(t, 10*time.Second, func() error {
		n, err := sync()
		if err == nil && n != 0 {
			return fmt.Errorf("events through %d before any record", n)
		}
		return err
	})
	for seq := uint64(1); seq <= 5; seq++ {
		r := event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: "test"})
		r.Seq, r.Time = seq, time.Now()
		a.publishEvent(t, r)
	}
	if n, err := sync(); err != nil || n != 5 {
		t.Errorf("sync after five records: %d, %v", n, err)
	}
	// Aimed elsewhere, it is not answered at all.
	got := make(chan string, 1)
	sub, err := b.nc.Subscribe(linkproto.DeclarationSubject(testMesh, "b"), func(m *nats.Msg) { got <- m.Subject })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	q := linkproto.Marshal(linkproto.Sync{Protocol: linkproto.ProtocolVersion, Node: "a"})
	if err := a.nc.PublishMsg(&nats.Msg{Subject: linkproto.SyncSubject(testMesh, "a"), Reply: linkproto.DeclarationSubject(testMesh, "b"), Data: q}); err != nil {
		t.Fatal(err)
	}
	if _, err := sync(); err != nil { // read after the stray one, in order
		t.Fatal(err)
	}
	select {
	case s := <-got:
		t.Errorf("a sync was answered into %s", s)
	default:
	}
}

// Records stored out of order (moved from a legacy stream after newer
// ones arrived) still count: the node resumes after what the stream holds,
// and a resend of only refused records would stall it.
func TestEventsThroughReadsPastRecordsStoredOutOfOrder(t *testing.T) {
	b := newBed(t)
	b.serve()
	a := b.node("a")
	for _, seq := range []uint64{2, 3, 1} {
		publishAsNode(t, a, seq, "a's own")
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		if got := a.history(t); len(got) != 3 {
			return fmt.Errorf("a's history %v", got)
		}
		return nil
	})
	if w := helloAnswered(t, a, 0); w.EventsThrough != 3 {
		t.Errorf("events through %d, want 3", w.EventsThrough)
	}
}
