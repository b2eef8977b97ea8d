package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/declaration/declarationtest"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// fakeNode answers pushes as mesh-host does, with its own credentials:
// ack says how, and after an accepted push it reports the apply with
// applied (unless report is false).
type fakeNode struct {
	*node
	ack    func(d *linkproto.Declaration) linkproto.Ack
	report func(d *linkproto.Declaration) *linkproto.Heartbeat
}

func (b *bed) fakeNode(name string, f fakeNode) *fakeNode {
	b.t.Helper()
	f.node = b.node(name)
	if _, err := f.nc.Subscribe(linkproto.DeclarationSubject(testMesh, name), func(m *nats.Msg) {
		d, err := linkproto.DecodeDeclaration(m.Data, testMesh, name)
		if err != nil {
			b.t.Errorf("%s: push: %v", name, err)
			return
		}
		if _, err := declaration.ParseJSON("push", d.Document); err != nil {
			b.t.Errorf("%s: pushed document: %v", name, err)
		}
		ack := f.ack(d)
		m.Respond(linkproto.Marshal(ack))
		if !ack.Accepted || f.report == nil {
			return
		}
		if hb := f.report(d); hb != nil {
			f.nc.Publish(linkproto.HeartbeatSubject(testMesh, name), linkproto.Marshal(hb))
		}
	}); err != nil {
		b.t.Fatal(err)
	}
	if err := f.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
	return &f
}

func accept(seq uint64) func(d *linkproto.Declaration) linkproto.Ack {
	return func(d *linkproto.Declaration) linkproto.Ack {
		return linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: d.Node, Revision: d.Revision, Accepted: true, Seq: seq}
	}
}

func applied(result event.Result, owned, drifted, failed int) func(d *linkproto.Declaration) *linkproto.Heartbeat {
	return func(d *linkproto.Declaration) *linkproto.Heartbeat {
		return &linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: d.Node, Version: "test",
			Sent: time.Now(), Interval: linkproto.Duration(time.Minute), Desired: d.Revision, Applied: d.Revision,
			Result: result, Owned: owned, Drifted: drifted, Failed: failed}
	}
}

func TestDeclareRefusals(t *testing.T) {
	b := newBed(t)
	c := b.client(time.Now())
	ctx := context.Background()
	opt := DeclareOptions{PushTimeout: 100 * time.Millisecond}
	var out bytes.Buffer
	if err := c.Declare(ctx, &out, "a", decl(t, "a", 3, "three\n"), opt); err != nil {
		t.Fatal(err)
	}

	otherMesh := decl(t, "a", 4, "x")
	otherMesh.Mesh = "work"
	for _, tc := range []struct {
		name string
		node string
		d    *declaration.Declaration
		want string
	}{
		{"another mesh", "a", otherMesh, `declaration refused: it is for mesh "work"; this control plane serves mesh "home"`},
		{"another node", "b", decl(t, "a", 4, "x"), `declaration refused: it is for node "a", not "b"`},
		{"bad node name", "A", decl(t, "a", 4, "x"), `declaration refused: node: invalid name "A"`},
		{"older", "a", decl(t, "a", 2, "two\n"), "declaration refused: a is at revision 3; revision 2 is older"},
		{"reused revision", "a", decl(t, "a", 3, "other\n"), "declaration refused: revision 3 of a is already stored with other content: bump the revision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := c.Declare(ctx, &out, tc.node, tc.d, opt)
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, want ErrRefused", err)
			}
			if !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got %q\nwant %q", err, tc.want)
			}
			if out.Len() != 0 {
				t.Errorf("printed %q", out.String())
			}
		})
	}
	stored, err := b.storedPush(ctx, "a")
	if err != nil || stored.Revision != 3 || !strings.Contains(string(stored.Document), "three") {
		t.Fatalf("stored %+v, %v; want revision 3 untouched", stored, err)
	}

	// The same declaration again is pushed again, not refused.
	out.Reset()
	if err := c.Declare(ctx, &out, "a", decl(t, "a", 3, "three\n"), opt); err != nil {
		t.Fatalf("the same declaration again: %v", err)
	}
	if got, want := out.String(), "a is offline: it will get revision 3 when it reconnects\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A declaration one byte over the limits, as sealing its secrets may make
// one that parsed, is refused naming the limit and nothing is stored; one at
// the limits is stored and pushed.
func TestDeclareAtTheLimits(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	c := b.client(time.Now())
	over := declarationtest.Maximal(testMesh, "a", 1)
	fill := over.Resources[len(over.Resources)-1].(*drivers.FileSpec)
	fill.Content += "f"
	err := c.Declare(ctx, &bytes.Buffer{}, "a", over, DeclareOptions{PushTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrRefused) || !errors.Is(err, declaration.ErrLimit) ||
		!strings.Contains(err.Error(), fmt.Sprintf("%d bytes, over the limit for a declaration: %d bytes", declaration.MaxBytes+1, declaration.MaxBytes)) {
		t.Fatalf("got %.300v", err)
	}
	// Under MaxBytes but over a push: refused, naming the push's limit
	// and the door it can take.
	err = c.Declare(ctx, &bytes.Buffer{}, "a", declarationtest.Maximal(testMesh, "a", 1), DeclareOptions{PushTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "the limit for a push") || !strings.Contains(err.Error(), "mesh-host apply --local FILE") {
		t.Fatalf("over a push: got %.300v", err)
	}
	if stored, err := b.storedPush(ctx, "a"); stored != nil || err != nil {
		t.Fatalf("stored %+v, %v", stored, err)
	}

	at := declarationtest.MaximalOf(testMesh, "a", 1, linkproto.MaxDeclarationSize-welcomeRoom-1<<10)
	if err := c.Declare(ctx, &bytes.Buffer{}, "a", at, DeclareOptions{PushTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatalf("at the limits: %.300v", err)
	}
	doc, _ := at.MarshalJSON()
	if stored, err := b.storedPush(ctx, "a"); err != nil || stored == nil || !bytes.Equal(stored.Document, doc) {
		t.Fatalf("at the limits: not stored as declared: %v", err)
	}
}

// Secrets sealed make a declaration larger than it parsed: Push holds the
// sealed form to the limit the node will.
func TestPushHoldsSealedSecretsToTheLimit(t *testing.T) {
	src := "mesh: " + testMesh + "\nnode: a\nrevision: 1\nresources:\n"
	for i := range 5 {
		src += fmt.Sprintf("  - file: {path: /etc/s%d, content: {secret: s%d}}\n", i, i)
	}
	d, err := declaration.ParseYAML("a.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Push(d, testMesh, "a"); err != nil {
		t.Fatalf("unsealed: %v", err)
	}
	for _, r := range d.Resources { // as sealFor leaves them, five of them over MaxBytes
		r.(*drivers.FileSpec).Secret.Sealed = strings.Repeat("A", declaration.MaxBytes/4)
		r.(*drivers.FileSpec).Secret.Sender = "X" + strings.Repeat("A", 55)
	}
	if _, err := Push(d, testMesh, "a"); !errors.Is(err, ErrRefused) || !errors.Is(err, declaration.ErrLimit) || !strings.Contains(err.Error(), "as JSON") {
		t.Fatalf("sealed: got %.300v", err)
	}
}

func TestDeclareOffline(t *testing.T) {
	b := newBed(t)
	var out bytes.Buffer
	d := decl(t, "a", 1, "hello\n")
	if err := b.client(time.Now()).Declare(context.Background(), &out, "a", d, DeclareOptions{PushTimeout: 100 * time.Millisecond, Wait: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "a is offline: it will get revision 1 when it reconnects\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	stored, err := b.storedPush(context.Background(), "a")
	doc, _ := d.MarshalJSON()
	if err != nil || stored == nil || !bytes.Equal(stored.Document, doc) {
		t.Fatalf("stored %+v, %v", stored, err)
	}
}

func TestDeclareAccepted(t *testing.T) {
	b := newBed(t)
	b.fakeNode("a", fakeNode{ack: accept(42), report: applied(event.ResultConverged, 2, 0, 0)})
	var out bytes.Buffer
	if err := b.client(time.Now()).Declare(context.Background(), &out, "a", decl(t, "a", 1, "hello\n"), DeclareOptions{Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	want := "a accepted revision 1 (journal #42)\na applied revision 1: converged; owned 2, drifted 0, failed 0\n"
	if got := out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}

	// --wait 0: the ack is enough.
	out.Reset()
	if err := b.client(time.Now()).Declare(context.Background(), &out, "a", decl(t, "a", 2, "two\n"), DeclareOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "a accepted revision 2 (journal #42)\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDeclareAlreadyApplied(t *testing.T) {
	b := newBed(t)
	// The node applies, then the same declaration is declared again: the
	// node has nothing new to report; its stored heartbeat says it applied.
	var pushes atomic.Int32
	b.fakeNode("a", fakeNode{ack: accept(5), report: func(d *linkproto.Declaration) *linkproto.Heartbeat {
		if pushes.Add(1) == 1 {
			return applied(event.ResultConverged, 1, 0, 0)(d)
		}
		return nil
	}})
	c := b.client(time.Now())
	d := decl(t, "a", 1, "hello\n")
	if err := c.Declare(context.Background(), &bytes.Buffer{}, "a", d, DeclareOptions{Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		hb, err := c.lastHeartbeat(context.Background(), "a")
		if err != nil || hb == nil {
			return errors.New("no stored heartbeat yet")
		}
		return nil
	})
	var out bytes.Buffer
	if err := c.Declare(context.Background(), &out, "a", d, DeclareOptions{Wait: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if want := "a accepted revision 1 (journal #5)\na applied revision 1: converged; owned 1, drifted 0, failed 0\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	if pushes.Load() != 2 {
		t.Errorf("%d pushes, want 2", pushes.Load())
	}
}

func TestDeclareRefusedByNode(t *testing.T) {
	b := newBed(t)
	b.fakeNode("a", fakeNode{ack: func(d *linkproto.Declaration) linkproto.Ack {
		return linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: "a", Revision: d.Revision, Reason: `resources[1].unit.name: "mesh-host.service" is the host's own unit`}
	}})
	var out bytes.Buffer
	err := b.client(time.Now()).Declare(context.Background(), &out, "a", decl(t, "a", 1, "hello\n"), DeclareOptions{Wait: time.Second})
	if !errors.Is(err, ErrRefused) {
		t.Fatalf("got %v, want ErrRefused", err)
	}
	if got, want := err.Error(), `declaration refused: a refused revision 1: resources[1].unit.name: "mesh-host.service" is the host's own unit`; got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

func TestDeclareNotAppliedInTime(t *testing.T) {
	b := newBed(t)
	b.fakeNode("a", fakeNode{ack: accept(1)})
	var out bytes.Buffer
	err := b.client(time.Now()).Declare(context.Background(), &out, "a", decl(t, "a", 1, "hello\n"), DeclareOptions{Wait: 200 * time.Millisecond})
	if !errors.Is(err, ErrNotApplied) {
		t.Fatalf("got %v, want ErrNotApplied", err)
	}
	if got, want := err.Error(), "declaration not applied: a did not report applying revision 1 within 200ms"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := out.String(), "a accepted revision 1 (journal #1)\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestDeclareApplyFailed(t *testing.T) {
	b := newBed(t)
	b.fakeNode("a", fakeNode{ack: accept(3), report: applied(event.ResultFailed, 2, 0, 1)})
	var out bytes.Buffer
	err := b.client(time.Now()).Declare(context.Background(), &out, "a", decl(t, "a", 1, "hello\n"), DeclareOptions{Wait: 10 * time.Second})
	if !errors.Is(err, ErrApplyFailed) {
		t.Fatalf("got %v, want ErrApplyFailed", err)
	}
	if !strings.Contains(out.String(), "a applied revision 1: failed; owned 2, drifted 0, failed 1\n") {
		t.Errorf("got %q", out.String())
	}
}

// A rollout stores a node's push over the entry it read to render it. If
// another declaration was stored meanwhile, the push is refused and the
// other stays: the read is not taken for the bucket's state.
func TestStoreOverAStaleReadIsRefused(t *testing.T) {
	b := newBed(t)
	c := b.client(time.Now())
	ctx := context.Background()
	opt := DeclareOptions{PushTimeout: 100 * time.Millisecond}
	if err := c.Declare(ctx, io.Discard, "a", decl(t, "a", 1, "one\n"), opt); err != nil {
		t.Fatal(err)
	}
	read, err := c.readStored(ctx, "a")
	if err != nil || read.Declaration().Revision != 1 {
		t.Fatalf("read %+v, %v", read, err)
	}
	// Someone else declares revision 2 after the read.
	if err := c.Declare(ctx, io.Discard, "a", decl(t, "a", 2, "theirs\n"), opt); err != nil {
		t.Fatal(err)
	}
	_, err = c.prepareOver(ctx, "a", decl(t, "a", 2, "mine\n"), read)
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "declared by someone else meanwhile") {
		t.Fatalf("stored over a stale read: %v, want refused", err)
	}
	// Nor over a read of nothing, once something is stored.
	if _, err := c.prepareOver(ctx, "a", decl(t, "a", 3, "mine\n"), nil); !errors.Is(err, ErrRefused) {
		t.Fatalf("created over an entry: %v, want refused", err)
	}
	stored, err := b.storedPush(ctx, "a")
	if err != nil || stored.Revision != 2 || !strings.Contains(string(stored.Document), "theirs") {
		t.Fatalf("stored %+v, %v; want their revision 2", stored, err)
	}
}

// A failed report names its cause: a node whose only trouble is drift it
// left alone was said to report "0 failed resources".
func TestWhyFailedNamesTheCause(t *testing.T) {
	for _, tt := range []struct {
		hb   linkproto.Heartbeat
		want string
	}{
		{linkproto.Heartbeat{Result: event.ResultFailed, Failed: 2, Drifted: 1}, "2 failed resources"},
		{linkproto.Heartbeat{Result: event.ResultFailed, Drifted: 1}, "1 drifted resource it has not repaired"},
		{linkproto.Heartbeat{Result: event.ResultFailed}, "a failed reconcile"},
	} {
		if got := whyFailed(&tt.hb); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.hb, got, tt.want)
		}
	}
}
