package control

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/nats-io/nats.go"
)

func planned(node string, rev uint64, unchanged int, steps ...linkproto.PlanStep) PlanResult {
	return PlanResult{Node: node, Status: PlanPlanned, Revision: rev,
		Answer: &linkproto.PlanAnswer{Node: node, Revision: rev, Steps: steps, Unchanged: unchanged, Seq: rev * 10}}
}

// TestGroupPlans: nodes with the same steps and counts are one group,
// whatever their revision and journal sequence; the largest group comes
// first, then by first node; offline, refused and failed nodes are in no
// group.
func TestGroupPlans(t *testing.T) {
	motd := linkproto.PlanStep{ID: "file:/etc/motd", Action: event.ActionUpdate, Differs: []string{"content"}}
	app := linkproto.PlanStep{ID: "file:/etc/app.conf", Action: event.ActionCreate}
	results := []PlanResult{
		planned("web-3", 4, 2, motd),
		planned("db-1", 2, 5),
		planned("web-1", 7, 2, motd),
		planned("web-2", 2, 2, motd),
		planned("app-1", 3, 2, motd, app),
		planned("app-2", 3, 3, motd), // another count of unchanged: another plan
		{Node: "web-9", Status: PlanOffline, Reason: "not connected"},
		{Node: "web-8", Status: PlanRefused, Reason: "revision 1 is older"},
		{Node: "web-7", Status: PlanFailed, Reason: "nothing declared"},
	}
	got := GroupPlans(results)
	var summary []string
	for _, g := range got {
		summary = append(summary, fmt.Sprintf("%s/%d/%d", strings.Join(g.Nodes, "+"), len(g.Steps), g.Unchanged))
	}
	want := []string{"web-1+web-2+web-3/1/2", "app-1/2/2", "app-2/1/3", "db-1/0/5"}
	if strings.Join(summary, " ") != strings.Join(want, " ") {
		t.Errorf("got groups %v, want %v", summary, want)
	}
}

// TestPrintPlans: each plan once with its count and nodes (abbreviated
// past ten), then the nodes not planned by status, then the counts; any
// node not planned makes it ErrNotPlanned.
func TestPrintPlans(t *testing.T) {
	motd := linkproto.PlanStep{ID: "file:/etc/motd", Action: event.ActionUpdate, Differs: []string{"content"}}
	var results []PlanResult
	for i := range 12 {
		results = append(results, planned(fmt.Sprintf("web-%02d", i+1), 2, 3, motd))
	}
	etc := linkproto.PlanStep{ID: "directory:/etc/app", Action: event.ActionReleased, Note: "left in place: it holds what the host does not own"}
	results = append(results, planned("db-1", 2, 5, etc))
	var buf bytes.Buffer
	if err := PrintPlans(&buf, results, false); err != nil {
		t.Fatalf("every node planned: got %v", err)
	}
	want := `12 nodes: 1 to change, 3 unchanged
  web-01, web-02, web-03, web-04, web-05, web-06, web-07, web-08, web-09, web-10 and 2 more
    updated     file:/etc/motd                                differs: content
1 node: 1 to change, 5 unchanged
  db-1
    released    directory:/etc/app                            left in place: it holds what the host does not own
13 nodes: 13 planned (2 plans)
`
	if buf.String() != want {
		t.Errorf("got\n%s\nwant\n%s", buf.String(), want)
	}

	results = append(results,
		PlanResult{Node: "web-99", Status: PlanOffline, Reason: "not connected"},
		PlanResult{Node: "web-98", Status: PlanRefused, Reason: "refused:\nrevision 1 is older"},
		PlanResult{Node: "web-97", Status: PlanBusy, Reason: "busy: another plan"})
	buf.Reset()
	err := PrintPlans(&buf, results, false)
	if !errors.Is(err, ErrNotPlanned) {
		t.Errorf("with nodes not planned: got %v, want %v", err, ErrNotPlanned)
	}
	for _, line := range []string{
		"offline (1):\n  web-99: not connected\n",
		"refused (1):\n  web-98: refused:; revision 1 is older\n",
		"busy (1):\n  web-97: busy: another plan\n",
		"16 nodes: 13 planned (2 plans), 1 offline, 1 refused, 1 busy\n",
	} {
		if !strings.Contains(buf.String(), line) {
			t.Errorf("the output lacks %q:\n%s", line, buf.String())
		}
	}
	buf.Reset()
	if err := PrintPlans(&buf, results, true); !errors.Is(err, ErrNotPlanned) {
		t.Errorf("--json with nodes not planned: got %v", err)
	}
	if n := strings.Count(buf.String(), "\n"); n != len(results) {
		t.Errorf("--json printed %d lines, want one per node (%d)", n, len(results))
	}
}

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
		return linkproto.PlanAnswer{Steps: []linkproto.PlanStep{{ID: "file:/etc/motd", Action: event.ActionUpdate}}, Seq: 9}
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
	if g := GroupPlans(got); len(g) != 1 || len(g[0].Nodes) != 2 {
		t.Errorf("got groups %+v, want web-1 and web-2 together", g)
	}
	// Nothing was stored by planning.
	if d, err := cl.storedFor(context.Background(), "web-1"); err != nil || d.Revision != 3 {
		t.Errorf("web-1's stored declaration after a plan: %v, %v; want revision 3", d, err)
	}
}
