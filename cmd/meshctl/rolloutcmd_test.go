package main

import (
	"testing"

	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
)

// TestProgressBar: the bar fills with the nodes done, whatever their end,
// and counts each end; a reverted node is counted as reverted, not as the
// failure or the convergence it had before.
func TestProgressBar(t *testing.T) {
	r := &rollout.Rollout{State: rollout.Aborted, Nodes: []rollout.Node{
		{Node: "a", Step: rollout.StepConverged},
		{Node: "b", Step: rollout.StepReverted},
		{Node: "c", Step: rollout.StepFailed},
		{Node: "d", Step: rollout.StepPushed},
		{Node: "e", Step: rollout.StepPending},
		{Node: "f", Step: rollout.StepUnchanged},
	}}
	want := "[####################..........] 4/6  converged 1  unchanged 1  failed 1  reverted 1  aborted "
	if got := progressBar(r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	r.Nodes[1].Step = rollout.StepConverged
	want = "[####################..........] 4/6  converged 2  unchanged 1  failed 1  aborted "
	if got := progressBar(r); got != want {
		t.Errorf("none reverted: got  %q\nwant %q", got, want)
	}
}
