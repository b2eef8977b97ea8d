package rollout

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/labels"
)

func TestPlanWaves(t *testing.T) {
	canary := labels.Set{"canary": ""}
	cases := []struct {
		name        string
		nodes       []string
		labelsOf    map[string]labels.Set
		canary      int
		maxInFlight string
		want        string // node:wave in order
		perWave     int
		bad         bool
	}{
		{name: "all at once", nodes: []string{"c", "a", "b"}, want: "a:0 b:0 c:0", perWave: 3},
		{name: "two at a time", nodes: []string{"a", "b", "c", "d", "e"}, maxInFlight: "2", want: "a:0 b:0 c:1 d:1 e:2", perWave: 2},
		{name: "one canary then the rest", nodes: []string{"a", "b", "c"}, canary: 1, want: "a:0 b:1 c:1", perWave: 2},
		{name: "labelled canaries first", nodes: []string{"a", "b", "c", "d"}, labelsOf: map[string]labels.Set{"c": canary, "d": canary},
			canary: 2, maxInFlight: "1", want: "c:0 d:0 a:1 b:2", perWave: 1},
		{name: "a percentage of the nodes after the canaries", nodes: []string{"a", "b", "c", "d", "e"}, canary: 1, maxInFlight: "50%",
			want: "a:0 b:1 c:1 d:2 e:2", perWave: 2},
		{name: "more canaries than nodes", nodes: []string{"a", "b"}, canary: 5, want: "a:0 b:0", perWave: 1},
		{name: "a bad max in flight", nodes: []string{"a"}, maxInFlight: "0", bad: true},
		{name: "no nodes", nodes: nil, want: "", perWave: 1},
	}
	for _, tc := range cases {
		got, perWave, err := PlanWaves(tc.nodes, tc.labelsOf, tc.canary, tc.maxInFlight)
		if tc.bad {
			if err == nil {
				t.Errorf("%s: got %v, want an error", tc.name, got)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		s := ""
		for i, n := range got {
			if n.Step != StepPending {
				t.Errorf("%s: %s is %s, want pending", tc.name, n.Node, n.Step)
			}
			if i > 0 {
				s += " "
			}
			s += fmt.Sprintf("%s:%d", n.Node, n.Wave)
		}
		if s != tc.want || perWave != tc.perWave {
			t.Errorf("%s: got %q, %d a wave; want %q, %d", tc.name, s, perWave, tc.want, tc.perWave)
		}
	}
}

func TestParseMaxInFlight(t *testing.T) {
	cases := []struct {
		in    string
		total int
		want  int
		bad   bool
	}{
		{"", 40, 40, false},
		{"", 0, 1, false},
		{"5", 40, 5, false},
		{"25%", 40, 10, false},
		{"1%", 40, 1, false}, // at least one node
		{"100%", 7, 7, false},
		{"0", 40, 0, true},
		{"-3", 40, 0, true},
		{"0%", 40, 0, true},
		{"101%", 40, 0, true},
		{"ten", 40, 0, true},
	}
	for _, c := range cases {
		got, err := ParseMaxInFlight(c.in, c.total)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("ParseMaxInFlight(%q, %d) = %d, %v; want %d, error %v", c.in, c.total, got, err, c.want, c.bad)
		}
	}
}

func TestCurrentWaveAndHalt(t *testing.T) {
	nodes := func(steps ...Step) []Node {
		var out []Node
		for i, s := range steps {
			out = append(out, Node{Node: fmt.Sprintf("n%d", i), Wave: i / 2, Step: s, Reason: "boom"})
		}
		return out
	}
	cases := []struct {
		name       string
		r          Rollout
		wave       int
		haltedBy   string
		wantReason string
	}{
		{name: "all pending", r: Rollout{Nodes: nodes(StepPending, StepPending, StepPending)}, wave: 0},
		{name: "wave 0 done", r: Rollout{Nodes: nodes(StepConverged, StepUnchanged, StepPushed)}, wave: 1},
		{name: "every node done", r: Rollout{Nodes: nodes(StepConverged, StepFailed, StepReverted)}, wave: -1},
		{name: "a canary failed", r: Rollout{Canary: 2, Nodes: nodes(StepPushed, StepFailed, StepPending)}, wave: 0,
			haltedBy: "n1", wantReason: "canary n1 failed in wave 0: boom"},
		{name: "a later failure without halt-on-failure goes on", r: Rollout{Canary: 2, Nodes: nodes(StepConverged, StepConverged, StepFailed, StepPushed)}, wave: 1},
		{name: "a later failure with halt-on-failure", r: Rollout{HaltOnFailure: true, Nodes: nodes(StepConverged, StepConverged, StepFailed, StepPushed)}, wave: 1,
			haltedBy: "n2", wantReason: "node n2 failed in wave 1: boom"},
		{name: "a deferred canary neither holds its wave back nor halts", r: Rollout{Canary: 2, HaltOnFailure: true, Nodes: nodes(StepDeferred, StepConverged, StepPending)}, wave: 1},
		{name: "every node done, one deferred", r: Rollout{HaltOnFailure: true, Nodes: nodes(StepConverged, StepDeferred, StepUnchanged)}, wave: -1},
	}
	for _, tc := range cases {
		r := tc.r
		r.State = Running
		wave := r.CurrentWave()
		if wave != tc.wave {
			t.Errorf("%s: wave %d, want %d", tc.name, wave, tc.wave)
			continue
		}
		if wave < 0 {
			continue
		}
		n := r.HaltIfFailed(wave)
		switch {
		case tc.haltedBy == "" && (n != nil || r.State != Running):
			t.Errorf("%s: halted by %v (%s), want it running", tc.name, n, r.State)
		case tc.haltedBy != "" && (n == nil || n.Node != tc.haltedBy || r.State != Halted || r.Reason != tc.wantReason):
			t.Errorf("%s: halted by %v, %s %q; want %s halting it: %q", tc.name, n, r.State, r.Reason, tc.haltedBy, tc.wantReason)
		}
	}
}

func TestRecover(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 5, 10, 0, time.UTC)
	node := func(name string, wave int, step Step, rev uint64) Node {
		return Node{Node: name, Wave: wave, Step: step, Revision: rev, Reason: "boom"}
	}
	cases := []struct {
		name      string
		r         Rollout
		converged []string // nodes whose heartbeat shows the revision converged
		recovered []string
		still     string
	}{
		{name: "the failed canary converged since", r: Rollout{Canary: 1, Nodes: []Node{node("a", 0, StepFailed, 5), node("b", 1, StepPending, 0)}},
			converged: []string{"a"}, recovered: []string{"a"}},
		{name: "the failed canary has not", r: Rollout{Canary: 1, Nodes: []Node{node("a", 0, StepFailed, 5), node("b", 1, StepPending, 0)}},
			still: "a"},
		{name: "one of two converged, the other still halts", r: Rollout{HaltOnFailure: true, Nodes: []Node{node("a", 0, StepFailed, 5), node("b", 0, StepFailed, 5)}},
			converged: []string{"a"}, recovered: []string{"a"}, still: "b"},
		{name: "a failure that does not halt stays failed, and the rollout goes on", r: Rollout{Canary: 1, Nodes: []Node{node("a", 0, StepConverged, 5), node("b", 1, StepFailed, 5)}}},
		{name: "a node failed before it was pushed has no revision to converge", r: Rollout{HaltOnFailure: true, Nodes: []Node{node("a", 0, StepFailed, 0)}},
			converged: []string{"a"}, still: "a"},
	}
	for _, tc := range cases {
		r := tc.r
		recovered, still := r.Recover(func(n Node) (time.Time, bool) { return at, slices.Contains(tc.converged, n.Node) })
		if !slices.Equal(recovered, tc.recovered) {
			t.Errorf("%s: recovered %v, want %v", tc.name, recovered, tc.recovered)
		}
		switch {
		case tc.still == "" && still != nil:
			t.Errorf("%s: %s still halts it, want none", tc.name, still.Node)
		case tc.still != "" && (still == nil || still.Node != tc.still):
			t.Errorf("%s: still halting %v, want %s", tc.name, still, tc.still)
		}
		for _, n := range r.Nodes {
			if slices.Contains(tc.recovered, n.Node) && (n.Step != StepConverged || !n.Done.Equal(at) || n.Reason != "") {
				t.Errorf("%s: %s recovered as %s at %v (%q)", tc.name, n.Node, n.Step, n.Done, n.Reason)
			}
		}
	}
}

func TestSummaryNamesTheOutstanding(t *testing.T) {
	r := Rollout{Nodes: []Node{{Node: "a", Step: StepConverged}, {Node: "b", Step: StepDeferred}, {Node: "c", Step: StepDeferred}, {Node: "d", Step: StepFailed}}}
	if got, want := r.Summary(), "1 converged, 0 unchanged, 1 failed, 2 deferred (outstanding: b, c)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	r.Nodes[1].Step, r.Nodes[2].Step = StepConverged, StepConverged
	if got, want := r.Summary(), "3 converged, 0 unchanged, 1 failed"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
