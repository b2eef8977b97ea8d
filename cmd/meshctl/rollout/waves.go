package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/labels"
)

// CurrentWave is the wave the rollout is at: that of its first node not
// yet done with; -1 when every node is.
func (r *Rollout) CurrentWave() int {
	for _, n := range r.Nodes {
		if !n.Step.Final() {
			return n.Wave
		}
	}
	return -1
}

// HaltIfFailed halts the rollout when a node of wave failed and that
// halts it: among the canaries always, later with HaltOnFailure. It
// returns the node that halted it, nil when none did.
func (r *Rollout) HaltIfFailed(wave int) *Node {
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Wave == wave && r.halts(n) {
			what := "node"
			if r.Canary > 0 && wave == 0 {
				what = "canary"
			}
			r.State = Halted
			r.Reason = fmt.Sprintf("%s %s failed in wave %d: %s", what, n.Node, wave, n.Reason)
			return n
		}
	}
	return nil
}

// halts says n failed, and that halts the rollout.
func (r *Rollout) halts(n *Node) bool {
	return n.Step == StepFailed && (r.Canary > 0 && n.Wave == 0 || r.HaltOnFailure)
}

// Recover looks again at the failed nodes of a halted rollout: each that
// has converged since, as converged says (with when), is converged. It
// returns the nodes that did, and the first node that still halts the
// rollout (nil: it may go on).
func (r *Rollout) Recover(converged func(Node) (time.Time, bool)) (recovered []string, still *Node) {
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Step != StepFailed || n.Revision == 0 {
			continue
		}
		if at, ok := converged(*n); ok {
			n.Step, n.Done, n.Reason = StepConverged, at, ""
			recovered = append(recovered, n.Node)
		}
	}
	for i := range r.Nodes {
		if r.halts(&r.Nodes[i]) {
			return recovered, &r.Nodes[i]
		}
	}
	return recovered, nil
}

// PlanWaves orders nodes and puts each in its wave, pending: the nodes
// labelled canary (by labelsOf) first, then by name; the first canary of
// them alone in wave 0; then maxInFlight at a time ("N", "P%" of the
// nodes after the canaries, or "" for all of them). Without canaries the
// waves start at 0 with the first maxInFlight nodes. It returns the nodes
// in wave order and the count maxInFlight came to.
func PlanWaves(nodes []string, labelsOf map[string]labels.Set, canary int, maxInFlight string) ([]Node, int, error) {
	nodes = slices.Clone(nodes)
	slices.SortStableFunc(nodes, func(a, b string) int {
		_, ca := labelsOf[a]["canary"]
		_, cb := labelsOf[b]["canary"]
		switch {
		case ca && !cb:
			return -1
		case cb && !ca:
			return 1
		}
		return strings.Compare(a, b)
	})
	rest := len(nodes) - min(canary, len(nodes))
	perWave, err := ParseMaxInFlight(maxInFlight, rest)
	if err != nil {
		return nil, 0, err
	}
	out := make([]Node, 0, len(nodes))
	for i, n := range nodes {
		wave := 0
		if canary > 0 {
			if i >= canary {
				wave = 1 + (i-canary)/perWave
			}
		} else {
			wave = i / perWave
		}
		out = append(out, Node{Node: n, Wave: wave, Step: StepPending})
	}
	return out, perWave, nil
}
