// Package rollout is what a rollout is: its record as the rollouts
// bucket keeps it (the rollout, each node's step, the states), its
// options and how they make waves (PlanWaves, a pure function), the
// events that tell its steps, and the releases it found bad.
//
// It does no I/O: the operator's client stores and changes rollouts, and
// the control service's rollout driver moves them on.
package rollout

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/linkproto"
)

// A rollout pushes declarations to the nodes a selector chooses, in waves:
// the canaries first, then at most MaxInFlight nodes at a time. A wave is
// complete when each of its nodes reports the revision it was pushed
// applied and converged (for a release: runs the release); a node that
// fails, rolls the release back, or stays silent past WaitHealthy fails,
// and a failure halts the rollout (always among the canaries, later with
// HaltOnFailure). The rollout's state lives in the rollouts bucket, so it
// survives the control service that drives it: whichever `meshctl serve`
// holds its lease drives it, and another takes over when that lease
// lapses.

// State is where a rollout stands.
type State string

const (
	Running State = "running"
	Paused  State = "paused"
	Halted  State = "halted"
	Done    State = "done"
	Aborted State = "aborted"
)

// Active says the rollout may still push.
func (s State) Active() bool { return s == Running || s == Paused }

// Step is where one node of a rollout stands.
type Step string

const (
	StepPending   Step = "pending"
	StepPushed    Step = "pushed"
	StepConverged Step = "converged"
	StepUnchanged Step = "unchanged" // rendered as it was: nothing pushed
	StepFailed    Step = "failed"
	StepReverted  Step = "reverted"
	// StepDeferred: offline when its wave started (or it did not answer
	// the push). Its declaration is stored, so it gets it with its next
	// hello; it does not hold its wave back nor halt the rollout, and it
	// becomes converged when it reports the revision converged.
	StepDeferred Step = "deferred"
)

// Final says the node is done with, as far as its wave goes.
func (s Step) Final() bool {
	return s == StepConverged || s == StepUnchanged || s == StepFailed || s == StepReverted || s == StepDeferred
}

// Rollout kinds: what each node is pushed.
const (
	// KindProfiles pushes each node what its profiles render.
	KindProfiles = "profiles"
	// KindRelease pushes each node its stored declaration with a host
	// release in place of the previous one.
	KindRelease = "release"
)

// Rollout is a rollout as the rollouts bucket keeps it.
type Rollout struct {
	ID       string `json:"id"`
	Mesh     string `json:"mesh"`
	Kind     string `json:"kind"`
	Selector string `json:"selector"`
	// Operator started it; every declaration it pushes is signed as
	// "OPERATOR via rollout ID", so each node's journal names both.
	Operator      string             `json:"operator"`
	Created       time.Time          `json:"created"`
	Updated       time.Time          `json:"updated"`
	Canary        int                `json:"canary"`
	MaxInFlight   int                `json:"max_in_flight"`
	HaltOnFailure bool               `json:"halt_on_failure"`
	WaitHealthy   linkproto.Duration `json:"wait_healthy"`
	// OfflineFails makes a node offline when its wave starts a failure
	// (`--offline fail`) rather than deferred.
	OfflineFails bool `json:"offline_fails,omitempty"`
	// HaltedAt is when it last halted: what status tells has changed
	// since.
	HaltedAt time.Time `json:"halted_at,omitzero"`
	// Release is the host release a release rollout delivers.
	Release *drivers.ArchiveSpec `json:"release,omitempty"`
	State   State                `json:"state"`
	Reason  string               `json:"reason,omitempty"`
	Nodes   []Node               `json:"nodes"`
	// Skipped are the selected nodes no profile selects: left alone.
	Skipped []string `json:"skipped,omitempty"`
	// Holder and LeaseUntil say which control service drives it, until
	// when.
	Holder     string    `json:"holder,omitempty"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// BucketRevision is the bucket's revision of the record, which a save
	// is conditional on (not stored).
	BucketRevision uint64 `json:"-"`
}

// Node is one node of a rollout.
type Node struct {
	Node string `json:"node"`
	Wave int    `json:"wave"`
	Step Step   `json:"step"`
	// Revision is the revision pushed; Before the stored revision it
	// replaced and LastGood the last one the node had converged then,
	// which a revert declares again.
	Revision uint64    `json:"revision,omitempty"`
	Before   uint64    `json:"before,omitempty"`
	LastGood uint64    `json:"last_good,omitempty"`
	Pushed   time.Time `json:"pushed,omitzero"`
	Done     time.Time `json:"done,omitzero"`
	Reason   string    `json:"reason,omitempty"`
}

// Waves is how many waves the rollout has.
func (r *Rollout) Waves() int {
	n := 0
	for _, nd := range r.Nodes {
		n = max(n, nd.Wave+1)
	}
	return n
}

// Counts counts the rollout's nodes by step.
func (r *Rollout) Counts() map[Step]int {
	out := map[Step]int{}
	for _, n := range r.Nodes {
		out[n.Step]++
	}
	return out
}

// Deferred are the nodes still deferred: offline when their wave started,
// not yet reporting the revision converged.
func (r *Rollout) Deferred() []string {
	var out []string
	for _, n := range r.Nodes {
		if n.Step == StepDeferred {
			out = append(out, n.Node)
		}
	}
	return out
}

// Summary counts the nodes by how they ended, naming those still
// deferred: "3 converged, 0 unchanged, 0 failed, 1 deferred (outstanding:
// web-4)".
func (r *Rollout) Summary() string {
	c := r.Counts()
	s := fmt.Sprintf("%d converged, %d unchanged, %d failed", c[StepConverged], c[StepUnchanged], c[StepFailed])
	if c[StepDeferred] > 0 {
		s += fmt.Sprintf(", %d deferred (outstanding: %s)", c[StepDeferred], strings.Join(r.Deferred(), ", "))
	}
	return s
}

// OperatorFor is who the rollout's declarations say made them.
func (r *Rollout) OperatorFor() string { return OperatorAs(r.Operator, " via rollout "+r.ID) }

// OperatorAs is operator with what it acts through, within the length
// a declaration's operator may have.
func OperatorAs(operator, through string) string {
	op := operator + through
	if len(op) > linkproto.MaxOperatorLen {
		op = op[:linkproto.MaxOperatorLen]
	}
	return op
}

// Options are a rollout's parameters.
type Options struct {
	Selector string
	// Canary is how many nodes go first, alone in wave 0.
	Canary int
	// MaxInFlight is "N" nodes or "P%" of the selected nodes per wave
	// after the canaries; empty means all of them at once.
	MaxInFlight   string
	HaltOnFailure bool
	// OfflineFails fails a node offline when its wave starts, rather than
	// deferring it.
	OfflineFails bool
	// WaitHealthy bounds how long a pushed node may take to report the
	// revision converged (zero: 5 minutes).
	WaitHealthy time.Duration
	// Release makes it a release rollout delivering this host release.
	Release *drivers.ArchiveSpec
}

// ParseMaxInFlight turns "N" or "P%" into a count of nodes out of total,
// at least 1.
func ParseMaxInFlight(s string, total int) (int, error) {
	if s == "" {
		return max(total, 1), nil
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 100 {
			return 0, fmt.Errorf("--max-in-flight %q: want a count or a percentage from 1%% to 100%%", s)
		}
		return max(total*n/100, 1), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("--max-in-flight %q: want a count of at least 1 or a percentage", s)
	}
	return n, nil
}

// NewID names a rollout by when it started, with a random tail.
func NewID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return "r-" + now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// Event is one step of a rollout, as the rollout events stream
// keeps it.
type Event struct {
	Rollout  string    `json:"rollout"`
	At       time.Time `json:"at"`
	Step     string    `json:"step"`
	Node     string    `json:"node,omitempty"`
	Revision uint64    `json:"revision,omitempty"`
	Detail   string    `json:"detail,omitempty"`
	Operator string    `json:"operator,omitempty"`
}

// BadRelease is a host release a node rolled back during a rollout: the
// mesh delivers it to no further node.
type BadRelease struct {
	Digest  string    `json:"digest"`
	Node    string    `json:"node"`
	Reason  string    `json:"reason"`
	Rollout string    `json:"rollout"`
	At      time.Time `json:"at"`
}
