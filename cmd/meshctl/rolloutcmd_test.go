package main

import (
	"testing"

	"github.com/mesh-host/mesh-host/cmd/meshctl/control"
)

// TestProgressBar: the bar fills with the nodes done, whatever their end,
// and counts each end; a reverted node is counted as reverted, not as the
// failure or the convergence it had before.
func TestProgressBar(t *testing.T) {
	r := &control.Rollout{State: control.RolloutAborted, Nodes: []control.RolloutNode{
		{Node: "a", Step: control.StepConverged},
		{Node: "b", Step: control.StepReverted},
		{Node: "c", Step: control.StepFailed},
		{Node: "d", Step: control.StepPushed},
		{Node: "e", Step: control.StepPending},
		{Node: "f", Step: control.StepUnchanged},
	}}
	want := "[####################..........] 4/6  converged 1  unchanged 1  failed 1  reverted 1  aborted "
	if got := progressBar(r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	r.Nodes[1].Step = control.StepConverged
	want = "[####################..........] 4/6  converged 2  unchanged 1  failed 1  aborted "
	if got := progressBar(r); got != want {
		t.Errorf("none reverted: got  %q\nwant %q", got, want)
	}
}
