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
	motd := linkproto.PlanStep{ID: "file:/etc/motd", Action: event.ActionUpdate, Differs: []string{"content"}, Digest: "sha256:m1"}
	app := linkproto.PlanStep{ID: "file:/etc/app.conf", Action: event.ActionCreate, Digest: "sha256:a1"}
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
	motd := linkproto.PlanStep{ID: "file:/etc/motd", Action: event.ActionUpdate, Differs: []string{"content"}, Digest: "sha256:m1"}
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

// TestPlansGroupByContent: two nodes whose steps are the same but whose
// declared content differs (another digest, another diff) are two plans;
// a node whose plan foresees a failure is counted and named apart from
// those planned, and makes PrintPlans ErrFailureForeseen. The diffs are
// shown escaped for the terminal.
func TestPlansGroupByContent(t *testing.T) {
	step := func(digest, diff, err string) linkproto.PlanStep {
		return linkproto.PlanStep{ID: "file:/etc/app.conf", Action: event.ActionUpdate, Differs: []string{"content"}, Digest: digest, Diff: diff, Error: err}
	}
	a := step("sha256:aa", "--- /etc/app.conf\n+++ /etc/app.conf\n@@ -1 +1 @@\n-x\n+tier a\n", "")
	b := step("sha256:bb", "--- /etc/app.conf\n+++ /etc/app.conf\n@@ -1 +1 @@\n-x\n+tier b\x1b]0;owned\x07\n", "")
	results := []client.PlanResult{
		planned("web-1", 2, 1, a),
		planned("web-2", 2, 1, a),
		planned("web-3", 2, 1, b),
		planned("web-4", 2, 1, step("sha256:aa", "", "file /etc/app.conf: parent directory does not exist")),
	}
	results[3].Failures = []string{"file:/etc/app.conf"}
	if g := GroupPlans(results); len(g) != 3 || strings.Join(g[0].Nodes, ",") != "web-1,web-2" {
		t.Errorf("got groups %+v, want web-1 and web-2 together, web-3 and web-4 alone", g)
	}
	// Nodes that say nothing of what their steps write (older than
	// digests in answers) are never one plan.
	old := step("", "", "")
	if g := GroupPlans([]client.PlanResult{planned("old-1", 2, 1, old), planned("old-2", 2, 1, old)}); len(g) != 2 {
		t.Errorf("got groups %+v, want two nodes without digests apart", g)
	}
	var buf bytes.Buffer
	err := PrintPlans(&buf, results, false)
	if !errors.Is(err, ErrFailureForeseen) || errors.Is(err, ErrNotPlanned) || !strings.Contains(err.Error(), "web-4") {
		t.Errorf("got %v, want %v naming web-4", err, ErrFailureForeseen)
	}
	for _, want := range []string{
		"1 node: 1 to change, 1 unchanged, 1 foreseen to fail\n  web-4\n",
		"\n    --- /etc/app.conf\n    +++ /etc/app.conf\n    @@ -1 +1 @@\n    -x\n    +tier a\n",
		"    +tier b\n",
		"4 nodes: 3 planned (2 plans), 1 foresees failures: web-4\n",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the output lacks %q:\n%s", want, buf.String())
		}
	}
	if strings.ContainsAny(buf.String(), "\x1b\x07") {
		t.Errorf("a diff's escape sequence reached the terminal:\n%q", buf.String())
	}
}
