package fleetview

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

func planned(node string, rev uint64, unchanged int, steps ...linkproto.PlanStep) client.PlanResult {
	return client.PlanResult{Node: node, Status: client.PlanPlanned, Revision: rev,
		Answer: &linkproto.PlanAnswer{Node: node, Revision: rev, Steps: steps, Unchanged: unchanged, Seq: rev * 10}}
}

// TestGroupPlans: nodes with the same steps and counts are one group,
// whatever their revision and journal sequence; the largest group comes
// first, then by first node; offline, refused and failed nodes are in no
// group.
func TestGroupPlans(t *testing.T) {
	motd := linkproto.PlanStep{ID: "file:/etc/motd", Action: event.ActionUpdate, Differs: []string{"content"}}
	app := linkproto.PlanStep{ID: "file:/etc/app.conf", Action: event.ActionCreate}
	results := []client.PlanResult{
		planned("web-3", 4, 2, motd),
		planned("db-1", 2, 5),
		planned("web-1", 7, 2, motd),
		planned("web-2", 2, 2, motd),
		planned("app-1", 3, 2, motd, app),
		planned("app-2", 3, 3, motd), // another count of unchanged: another plan
		{Node: "web-9", Status: client.PlanOffline, Reason: "not connected"},
		{Node: "web-8", Status: client.PlanRefused, Reason: "revision 1 is older"},
		{Node: "web-7", Status: client.PlanFailed, Reason: "nothing declared"},
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
	var results []client.PlanResult
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
		client.PlanResult{Node: "web-99", Status: client.PlanOffline, Reason: "not connected"},
		client.PlanResult{Node: "web-98", Status: client.PlanRefused, Reason: "refused:\nrevision 1 is older"},
		client.PlanResult{Node: "web-97", Status: client.PlanBusy, Reason: "busy: another plan"})
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
