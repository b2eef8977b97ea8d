package client

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// planNode answers plan requests as mesh-host does, with a node's own
// credentials (so its answer travels under the node's permissions): it
// checks the request is for it and signed for planning, then answers with
// answer.
func (b *bed) planNode(name string, answer func(p *linkproto.PlanRequest) linkproto.PlanAnswer) {
	b.t.Helper()
	n := b.node(name)
	if _, err := n.nc.Subscribe(linkproto.PlanSubject(testMesh, name), func(m *nats.Msg) {
		p, err := linkproto.DecodePlanRequest(m.Data, testMesh, name)
		if err == nil {
			err = p.Verify(n.trust)
		}
		if err == nil {
			asPush := linkproto.Declaration(*p)
			if asPush.Verify(n.trust) == nil {
				err = errors.New("the plan request verifies as a push")
			}
		}
		if err != nil {
			b.t.Errorf("%s: plan request: %v", name, err)
			return
		}
		a := answer(p)
		a.Protocol, a.Node, a.Revision = linkproto.ProtocolVersion, name, p.Revision
		m.Respond(linkproto.Marshal(a))
	}); err != nil {
		b.t.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
}

// TestPlanAsksEveryNode: each node is asked for the plan of its stored
// declaration at the next revision, signed for planning; the answers come
// back under the nodes' own permissions, and a node not connected, busy,
// refusing or with nothing declared is a result saying so.
func TestPlanAsksEveryNode(t *testing.T) {
	b := newBed(t)
	cl := b.client(time.Now())
	for _, n := range []string{"web-1", "web-2", "web-3", "web-4", "web-5"} {
		var out bytes.Buffer
		if err := cl.Declare(context.Background(), &out, n, decl(t, n, 3, "hi\n"), DeclareOptions{PushTimeout: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	motd := func(p *linkproto.PlanRequest) linkproto.PlanAnswer {
		if !strings.Contains(string(p.Document), `"content":"hi\n"`) || p.Operator != "tester@bed" {
			t.Errorf("%s: planned %s by %q, want its stored declaration by the client's operator", p.Node, p.Document, p.Operator)
		}
		return linkproto.PlanAnswer{Steps: []linkproto.PlanStep{{ID: "file:/etc/motd", Action: event.ActionUpdate, Digest: "sha256:m1"}}, Seq: 9}
	}
	b.planNode("web-1", motd)
	b.planNode("web-2", motd)
	b.planNode("web-4", func(*linkproto.PlanRequest) linkproto.PlanAnswer {
		return linkproto.PlanAnswer{Refused: "busy: another plan is being made; ask again", Busy: true}
	})
	b.planNode("web-5", func(*linkproto.PlanRequest) linkproto.PlanAnswer {
		return linkproto.PlanAnswer{Refused: "revision 4 is older than revision 9, already applied"}
	})
	names := []string{"web-1", "web-2", "web-3", "web-4", "web-5", "db-1"}
	got := cl.Plan(context.Background(), names, cl.NextStored, PlanOptions{Deadline: 2 * time.Second, Parallel: 2})
	want := []struct {
		status string
		rev    uint64
		reason string
	}{
		{PlanPlanned, 4, ""},
		{PlanPlanned, 4, ""},
		{PlanOffline, 4, "not connected"},
		{PlanBusy, 4, "busy"},
		{PlanRefused, 4, "older"},
		{PlanFailed, 0, "nothing declared for db-1"},
	}
	for i, w := range want {
		r := got[i]
		if r.Node != names[i] || r.Status != w.status || r.Revision != w.rev || !strings.Contains(r.Reason, w.reason) {
			t.Errorf("%s: got %+v, want %s of revision %d (%q)", names[i], r, w.status, w.rev, w.reason)
		}
	}
	if g := planGroups(got); len(g) != 1 || len(g[0]) != 2 {
		t.Errorf("got groups %+v, want web-1 and web-2 together", g)
	}
	// Nothing was stored by planning.
	if d, err := cl.storedFor(context.Background(), "web-1"); err != nil || d.Revision != 3 {
		t.Errorf("web-1's stored declaration after a plan: %v, %v; want revision 3", d, err)
	}
}

// TestPlanBoundsWhatANodeSays: a node's diff over MaxPlanDiffSize is cut
// as the node would have cut it, and a step with an error makes the node's
// result name it as a failure foreseen: not Clean, though planned.
func TestPlanBoundsWhatANodeSays(t *testing.T) {
	b := newBed(t)
	cl := b.client(time.Now())
	var out bytes.Buffer
	if err := cl.Declare(context.Background(), &out, "web-1", decl(t, "web-1", 3, "hi\n"), DeclareOptions{PushTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	b.planNode("web-1", func(*linkproto.PlanRequest) linkproto.PlanAnswer {
		return linkproto.PlanAnswer{Steps: []linkproto.PlanStep{
			{ID: "file:/etc/motd", Action: event.ActionUpdate, Diff: strings.Repeat("+x\n", 60000)},
			{ID: "file:/srv/app.conf", Action: event.ActionCreate, Error: "parent directory does not exist"},
		}}
	})
	got := cl.Plan(context.Background(), []string{"web-1"}, cl.NextStored, PlanOptions{Deadline: 5 * time.Second})[0]
	if got.Status != PlanPlanned || got.Clean() || len(got.Failures) != 1 || got.Failures[0] != "file:/srv/app.conf" {
		t.Errorf("got %+v, want planned, not clean, foreseeing file:/srv/app.conf failing", got)
	}
	if d := got.Answer.Steps[0].Diff; len(d) > linkproto.MaxPlanDiffSize || !strings.Contains(d, "diff cut") {
		t.Errorf("a node's %d-byte diff kept %d bytes, want at most %d with a note", 3*60000, len(d), linkproto.MaxPlanDiffSize)
	}
}
