package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The core security property of the mesh: a node's credentials reach its
// own subjects and nothing else. Each test makes one attempt node a must
// not be able to make, shows that it did nothing, and that the broker told
// the node so; TestNodeOwnSubjects shows what the same credentials can do.

// deniedWait is how long a test gives a message that must not arrive, after
// a round trip that would have brought it.
const deniedWait = 100 * time.Millisecond

func TestNodeCannotReceiveAnotherNodesPush(t *testing.T) {
	b := newBed(t)
	a, bNode := b.node("a"), b.node("b")

	spy, err := a.nc.SubscribeSync(linkproto.DeclarationSubject(testMesh, "b"))
	if err != nil {
		t.Fatal(err)
	}
	a.violation(t, linkproto.DeclarationSubject(testMesh, "b"))

	// b answers its push, so the push was delivered to every subscriber
	// there was.
	if _, err := bNode.nc.Subscribe(linkproto.DeclarationSubject(testMesh, "b"), func(m *nats.Msg) {
		m.Respond(linkproto.Marshal(linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: "b", Revision: 1, Accepted: true, Seq: 1}))
	}); err != nil {
		t.Fatal(err)
	}
	if err := bNode.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	push := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: "b", Revision: 1, Document: []byte(`{"secret":true}`)}
	if _, err := b.nc.Request(linkproto.DeclarationSubject(testMesh, "b"), linkproto.Marshal(push), 5*time.Second); err != nil {
		t.Fatalf("b's push: %v", err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if m, err := spy.NextMsg(deniedWait); err == nil {
		t.Fatalf("a received b's push: %s", m.Data)
	}
}

func TestNodeCannotSubscribeOutsideItsOwnDown(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	for _, subject := range []string{
		"mesh.home.down.*.declaration", // every node's pushes
		"mesh.home.down.b.inbox.>",     // b's replies
		"mesh.home.up.>",               // every node's reports
		linkproto.HeartbeatSubject(testMesh, "b"),
		linkproto.NodeEvents(testMesh, "a"), // even its own up subjects
		"_INBOX.>",                          // the control plane's replies
		"$JS.API.>",
		"$KV.>",
		"$SYS.>",
		">",
	} {
		t.Run(subject, func(t *testing.T) {
			if _, err := a.nc.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			a.violation(t, subject)
		})
	}
}

func TestNodeCannotPublishAnotherNodesHeartbeat(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	reports, err := b.nc.SubscribeSync(linkproto.AllHeartbeats(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	forged := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: "b", Version: "forged", Sent: time.Now()}
	if err := a.nc.Publish(linkproto.HeartbeatSubject(testMesh, "b"), linkproto.Marshal(forged)); err != nil {
		t.Fatal(err)
	}
	own := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: "a", Version: "test", Sent: time.Now()}
	if err := a.nc.Publish(linkproto.HeartbeatSubject(testMesh, "a"), linkproto.Marshal(own)); err != nil {
		t.Fatal(err)
	}
	a.violation(t, linkproto.HeartbeatSubject(testMesh, "b"))

	// The broker handles a connection's messages in order: the forged one
	// would have come first.
	m, err := reports.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatalf("a's own heartbeat: %v", err)
	}
	if m.Subject != linkproto.HeartbeatSubject(testMesh, "a") {
		t.Fatalf("the control plane got a heartbeat on %s: %s", m.Subject, m.Data)
	}
	hb, err := b.client(time.Now()).lastHeartbeat(context.Background(), "b")
	if err != nil || hb != nil {
		t.Fatalf("the heartbeats stream holds %+v (err %v) for b", hb, err)
	}
}

func TestNodeCannotPublishAnotherNodesEvents(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	ctx := context.Background()
	forged := event.New(event.DriftObserved, 0, "file:/etc/motd", event.DriftObservedPayload{})
	forged.Seq, forged.Time = 1, time.Now()
	body, _ := linkproto.EventBody(forged)
	if err := a.nc.Publish(linkproto.EventSubject(testMesh, "b", 1), body); err != nil {
		t.Fatal(err)
	}
	a.violation(t, linkproto.EventSubject(testMesh, "b", 1))
	// a's own record is stored after the forged one would have been.
	a.publishEvent(t, forged)

	events, err := b.js.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := events.GetLastMsgForSubject(ctx, linkproto.NodeEvents(testMesh, "b")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the events stream holds %v (err %v) for b", got, err)
	}
	info, err := events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("the events stream holds %d messages, want a's 1", info.State.Msgs)
	}
}

func TestNodeCannotUseJetStreamAPI(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	ctx := context.Background()
	if _, err := b.client(time.Now()).store.Desired(ctx, testMesh); err != nil {
		t.Fatal(err)
	}
	kv, err := b.js.KeyValue(ctx, linkproto.DesiredBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, linkproto.DesiredKey(testMesh, "b"), []byte(`{"mesh":"home","node":"b","revision":1,"resources":[]}`)); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, subject, body string }{
		{"stream info", "$JS.API.STREAM.INFO." + linkproto.EventsStream, ""},
		{"account info", "$JS.API.INFO", ""},
		{"stream list", "$JS.API.STREAM.LIST", ""},
		{"stream delete", "$JS.API.STREAM.DELETE." + linkproto.EventsStream, ""},
		{"purge b's heartbeats", "$JS.API.STREAM.PURGE." + linkproto.HeartbeatsStream, `{"filter":"mesh.home.up.b.heartbeat"}`},
		{"consumer on the events", "$JS.API.CONSUMER.CREATE." + linkproto.EventsStream, `{"stream_name":"MESH_EVENTS","config":{"filter_subject":"mesh.home.up.b.events"}}`},
		{"KV get of b's key", "$JS.API.DIRECT.GET.KV_" + linkproto.DesiredBucket + ".$KV." + linkproto.DesiredBucket + "." + linkproto.DesiredKey(testMesh, "b"), ""},
		{"KV get by message", "$JS.API.STREAM.MSG.GET.KV_" + linkproto.DesiredBucket, `{"last_by_subj":"$KV.MESH_DESIRED.home.b"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if m, err := a.nc.Request(tc.subject, []byte(tc.body), deniedWait); err == nil {
				t.Fatalf("a got an answer from %s: %s", tc.subject, m.Data)
			}
			a.violation(t, tc.subject)
		})
	}

	t.Run("jetstream client", func(t *testing.T) {
		js, err := jetstream.New(a.nc)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(ctx, deniedWait)
		defer cancel()
		if _, err := js.KeyValue(ctx, linkproto.DesiredBucket); err == nil {
			t.Fatal("a opened the desired-state bucket")
		}
		a.violation(t, "$JS.API.STREAM.INFO.KV_"+linkproto.DesiredBucket)
	})

	// Writing the KV's subjects directly would change desired state: a's
	// own as much as b's.
	for _, node := range []string{"a", "b"} {
		subject := "$KV." + linkproto.DesiredBucket + "." + linkproto.DesiredKey(testMesh, node)
		t.Run("write "+subject, func(t *testing.T) {
			if err := a.nc.Publish(subject, []byte(`{"mesh":"home","node":"`+node+`","revision":99,"resources":[]}`)); err != nil {
				t.Fatal(err)
			}
			a.violation(t, subject)
		})
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"a", "b"} {
		e, err := kv.Get(ctx, linkproto.DesiredKey(testMesh, node))
		if node == "a" && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("a's desired state: %v, err %v; want none", e, err)
		}
		if node == "b" && (err != nil || e.Revision() != 1) {
			t.Errorf("b's desired state changed: %v, err %v", e, err)
		}
	}
}

func TestNodeCannotPublishElsewhere(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	for _, subject := range []string{
		"mesh.home.down.b.declaration", // push to another node
		"mesh.home.down.a.declaration", // or to itself
		"mesh.home.up.b.hello",         // say hello as b
		"mesh.other.up.a.heartbeat",    // another mesh
		"_INBOX.guess",                 // a reply to a request it never got
		"$SYS.REQ.SERVER.PING",
	} {
		t.Run(subject, func(t *testing.T) {
			if err := a.nc.Publish(subject, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			a.violation(t, subject)
		})
	}
}

func TestNodeAnswersAPushOnce(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	var reply string
	got := make(chan struct{})
	if _, err := a.nc.Subscribe(linkproto.DeclarationSubject(testMesh, "a"), func(m *nats.Msg) {
		reply = m.Reply
		ack := linkproto.Marshal(linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: "a", Revision: 1, Accepted: true, Seq: 1})
		m.Respond(ack)
		m.Respond(ack) // the response permission allows one
		close(got)
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	push := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: "a", Revision: 1, Document: []byte(`{}`)}
	if _, err := b.nc.Request(linkproto.DeclarationSubject(testMesh, "a"), linkproto.Marshal(push), 5*time.Second); err != nil {
		t.Fatalf("a's ack: %v", err)
	}
	<-got
	a.violation(t, reply)
}

func TestNodeOwnSubjects(t *testing.T) {
	b := newBed(t)
	b.serve()
	a := b.node("a")
	ctx := context.Background()

	// Its heartbeat reaches the control plane and the heartbeats stream.
	reports, err := b.nc.SubscribeSync(linkproto.AllHeartbeats(testMesh))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	hb := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: "a", Version: "test", Sent: time.Now(), Interval: linkproto.Duration(time.Minute)}
	if err := a.nc.Publish(linkproto.HeartbeatSubject(testMesh, "a"), linkproto.Marshal(hb)); err != nil {
		t.Fatal(err)
	}
	if m, err := reports.NextMsg(5 * time.Second); err != nil || m.Subject != linkproto.HeartbeatSubject(testMesh, "a") {
		t.Fatalf("a's heartbeat: %v, %v", m, err)
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		got, err := b.client(time.Now()).lastHeartbeat(ctx, "a")
		if err != nil || got == nil {
			return errors.New("a's heartbeat is not in the heartbeats stream")
		}
		return nil
	})

	// It receives its push and answers it.
	if _, err := a.nc.Subscribe(linkproto.DeclarationSubject(testMesh, "a"), func(m *nats.Msg) {
		d, err := linkproto.DecodeDeclaration(m.Data, testMesh, "a")
		if err != nil {
			t.Error(err)
			return
		}
		m.Respond(linkproto.Marshal(linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: "a", Revision: d.Revision, Accepted: true, Seq: 9}))
	}); err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	push := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: "a", Revision: 4, Document: []byte(`{}`)}
	m, err := b.nc.Request(linkproto.DeclarationSubject(testMesh, "a"), linkproto.Marshal(push), 5*time.Second)
	if err != nil {
		t.Fatalf("a's ack: %v", err)
	}
	var ack linkproto.Ack
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &ack); err != nil || !ack.Accepted || ack.Revision != 4 {
		t.Fatalf("a's ack: %+v, %v", ack, err)
	}

	// Its records reach the events stream, each once.
	r := event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: "test"})
	r.Seq, r.Time = 1, time.Now()
	a.publishEvent(t, r)
	a.publishEvent(t, r)
	if n := a.stored(t, 1); n != 1 {
		t.Fatalf("record 1 sent twice is stored %d times, want once", n)
	}

	// Its hello is answered.
	helloAnswered(t, a, 0)
	a.noErrors(t)
}

func TestNodeCredentialsSayExactlyThis(t *testing.T) {
	b := newBed(t)
	creds, err := os.ReadFile(b.nodeCreds("web-1", time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	claims := userClaims(t, creds)
	if got, want := []string(claims.Pub.Allow), []string{"mesh.home.up.web-1.>"}; !slices.Equal(got, want) {
		t.Errorf("pub allow %v, want %v", got, want)
	}
	if got, want := []string(claims.Sub.Allow), []string{"mesh.home.down.web-1.>"}; !slices.Equal(got, want) {
		t.Errorf("sub allow %v, want %v", got, want)
	}
	if len(claims.Pub.Deny) != 0 || len(claims.Sub.Deny) != 0 {
		t.Errorf("deny lists %v %v; want none (allow lists are the whole grant)", claims.Pub.Deny, claims.Sub.Deny)
	}
	if r := claims.Resp; r == nil || r.MaxMsgs != 1 || r.Expires != time.Minute {
		t.Errorf("response permission %+v, want one reply within a minute", r)
	}
	if claims.IssuerAccount != b.a.AccountPublicKey() {
		t.Errorf("issuer account %s, want the mesh account %s", claims.IssuerAccount, b.a.AccountPublicKey())
	}
	if claims.BearerToken {
		t.Error("a bearer token: the node's key must sign its connection")
	}
	if got := time.Until(time.Unix(claims.Expires, 0)); got <= 0 || got > time.Hour {
		t.Errorf("the credentials expire in %v, want within the hour asked", got)
	}
}

// TestNodeCannotAimTheStreamsAcksAtTheAPI: the streams answer a node's
// publish on its own events or heartbeat subject with an acknowledgement
// to the reply subject the node chose. Aimed at the JetStream API (a
// stream delete, a purge), that answer must not act on anything.
func TestNodeCannotAimTheStreamsAcksAtTheAPI(t *testing.T) {
	b := newBed(t)
	a := b.node("a")
	r := event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: "test"})
	r.Seq, r.Time = 1, time.Now()
	a.publishEvent(t, r)
	targets := []string{
		"$JS.API.STREAM.DELETE." + linkproto.EventsStream,
		"$JS.API.STREAM.PURGE." + linkproto.EventsStream,
		"$JS.API.STREAM.DELETE." + linkproto.HeartbeatsStream,
		"$KV." + linkproto.DesiredBucket + "." + linkproto.DesiredKey(testMesh, "b"),
	}
	for i, target := range targets {
		body, _ := linkproto.EventBody(event.Record{Seq: uint64(i + 2), Time: time.Now(), Kind: event.HostStarted})
		for _, subj := range []string{linkproto.EventSubject(testMesh, "a", uint64(i+2)), linkproto.HeartbeatSubject(testMesh, "a")} {
			m := &nats.Msg{Subject: subj, Reply: target, Data: body}
			if err := a.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The node's own publishes were stored (they are its subjects), and
	// nothing else happened: both streams are there, the events stream
	// still holds the first record, and b has no desired state.
	ctx := context.Background()
	basetest.Eventually(t, 5*time.Second, func() error {
		s, err := b.js.Stream(ctx, linkproto.EventsStream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs < uint64(1+len(targets)) {
			return fmt.Errorf("events stream holds %d messages", info.State.Msgs)
		}
		return nil
	})
	if _, err := b.js.Stream(ctx, linkproto.HeartbeatsStream); err != nil {
		t.Errorf("the heartbeats stream: %v", err)
	}
	kv, err := b.js.KeyValue(ctx, linkproto.DesiredBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, linkproto.DesiredKey(testMesh, "b")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("b's desired state after a's publishes: %v", err)
	}
}
