package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/cmd/internal/fanout"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/profile"
)

// A fleet's plan: every selected node is sent the declaration it would
// get, signed for planning only, on its own plan subject, and answers with
// the plan it computes against its machine. Nothing is stored and nothing
// changes on the nodes; each journals one plan.answered record.

// Defaults of PlanOptions.
const (
	DefaultPlanDeadline = 10 * time.Second
	// DefaultPlanParallel bounds the requests in flight: enough that the
	// nodes' own planning, not the asking, is what a fleet waits for.
	DefaultPlanParallel = 256
)

// Statuses of a node in a fleet's plan.
const (
	PlanPlanned = "planned"
	PlanOffline = "offline"
	PlanRefused = "refused"
	PlanBusy    = "busy"
	PlanFailed  = "failed"
)

// PlanOptions says how long a fleet's plan waits and how many requests it
// has in flight.
type PlanOptions struct {
	// Deadline bounds the whole plan; DefaultPlanDeadline when 0. A node
	// that has not answered by then counts as offline.
	Deadline time.Duration
	// Parallel bounds the requests in flight; DefaultPlanParallel when 0.
	Parallel int
}

// Document gives the declaration to plan for node.
type Document func(ctx context.Context, node string) (*declaration.Declaration, error)

// PlanResult is one node's part in a fleet's plan.
type PlanResult struct {
	Node   string `json:"node"`
	Status string `json:"status"`
	// Revision is the revision planned.
	Revision uint64 `json:"revision,omitempty"`
	// Answer is the node's answer, when it gave one.
	Answer *linkproto.PlanAnswer `json:"answer,omitempty"`
	// Reason says why a node is not planned: offline, what it refused,
	// what failed.
	Reason string `json:"reason,omitempty"`
	// Failures are the resources a planned node foresees failing (steps
	// with an error): applying the declaration there would fail.
	Failures []string `json:"failures,omitempty"`
}

// Clean reports whether r planned and foresees no failure: what a
// rollout may follow.
func (r PlanResult) Clean() bool {
	return r.Status == PlanPlanned && len(r.Failures) == 0
}

// Plan asks each of nodes for its plan of the declaration doc gives for
// it, concurrently, and returns one result per node, in the order of
// nodes. It never fails as a whole: a node that cannot be asked, or does
// not answer, is a result saying so.
func (c *Client) Plan(ctx context.Context, nodes []string, doc Document, opt PlanOptions) []PlanResult {
	if opt.Deadline <= 0 {
		opt.Deadline = DefaultPlanDeadline
	}
	if opt.Parallel <= 0 {
		opt.Parallel = DefaultPlanParallel
	}
	ctx, cancel := context.WithTimeout(ctx, opt.Deadline)
	defer cancel()
	out := make([]PlanResult, len(nodes))
	started := fanout.Each(ctx, opt.Parallel, nodes, func(i int, node string) {
		out[i] = c.planOne(ctx, node, doc, opt.Deadline)
	})
	for i, node := range nodes[started:] {
		out[started+i] = PlanResult{Node: node, Status: PlanOffline, Reason: fmt.Sprintf("not asked within the deadline (%s)", opt.Deadline)}
	}
	return out
}

// planOne asks node for its plan.
func (c *Client) planOne(ctx context.Context, node string, doc Document, deadline time.Duration) PlanResult {
	r := PlanResult{Node: node, Status: PlanFailed}
	d, err := doc(ctx, node)
	if err != nil {
		r.Reason = err.Error()
		return r
	}
	r.Revision = d.Revision
	req, err := c.planRequest(ctx, node, d)
	if err != nil {
		r.Reason = err.Error()
		return r
	}
	m, err := c.Conn.RequestWithContext(ctx, linkproto.PlanSubject(c.Mesh, node), linkproto.Marshal(req))
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		r.Status, r.Reason = PlanOffline, "not connected"
		return r
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		r.Status, r.Reason = PlanOffline, fmt.Sprintf("no answer within the deadline (%s)", deadline)
		return r
	case err != nil:
		r.Reason = fmt.Sprintf("ask for the plan: %v", err)
		return r
	}
	var a linkproto.PlanAnswer
	if err := linkproto.Decode(m.Data, linkproto.MaxPlanAnswerSize, &a); err != nil {
		r.Reason = fmt.Sprintf("the answer is not a plan: %v", err)
		return r
	}
	if a.Node != node || a.Revision != d.Revision {
		r.Reason = fmt.Sprintf("answered with %s's plan of revision %d", a.Node, a.Revision)
		return r
	}
	for i, s := range a.Steps {
		// The node's word: bounded as the node bounds it, whatever it sent.
		a.Steps[i].Diff = linkproto.ClipDiff(s.Diff)
		if s.Error != "" {
			r.Failures = append(r.Failures, s.ID)
		}
	}
	r.Answer = &a
	switch {
	case a.Busy:
		r.Status, r.Reason = PlanBusy, a.Refused
	case a.Refused != "":
		r.Status, r.Reason = PlanRefused, a.Refused
	default:
		r.Status = PlanPlanned
	}
	return r
}

// planRequest makes d, with its secrets sealed to node, a plan request
// signed for planning with the mesh's declaration key. It is checked as
// a declaration is (Push), and stored nowhere.
func (c *Client) planRequest(ctx context.Context, node string, d *declaration.Declaration) (*linkproto.PlanRequest, error) {
	push, _, err := c.sealedPush(ctx, node, d)
	if err != nil {
		return nil, err
	}
	if c.Key == nil {
		return nil, errors.New("no declaration key to sign with (the authority's declarations.nk)")
	}
	if err := linkproto.ValidOperator(c.Operator); err != nil {
		return nil, fmt.Errorf("%w: %v (give --operator)", ErrRefused, err)
	}
	p := linkproto.PlanRequest(*push)
	p.Operator = c.Operator
	if err := p.Sign(c.Key); err != nil {
		return nil, err
	}
	return &p, nil
}

// NextStored is the Document of node's stored desired state at its next
// revision: what declaring it again, changed, would send. A node with none
// stored is ErrNothingDeclared.
func (c *Client) NextStored(ctx context.Context, node string) (*declaration.Declaration, error) {
	stored, err := c.storedFor(ctx, node)
	if err != nil {
		return nil, err
	}
	if stored == nil {
		return nil, fmt.Errorf("%w for %s: declare it first, or plan a --file", ErrNothingDeclared, node)
	}
	next := *stored
	next.Revision++
	return &next, nil
}

// RenderedDocument is the Document of what the profiles render for each
// node, at the revision after the one stored for it. A node no profile selects plans its
// stored declaration (NextStored): what the plan shows then is its drift.
// The profiles and labels are read once, now.
func (c *Client) RenderedDocument(ctx context.Context) (Document, error) {
	f, err := c.loadFleet(ctx)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, node string) (*declaration.Declaration, error) {
		r, err := f.render(node)
		if errors.Is(err, profile.ErrNoProfile) {
			return c.NextStored(ctx, node)
		}
		if err != nil {
			return nil, err
		}
		d := *r.Declaration
		if stored := r.Stored(); stored != nil {
			d.Revision = stored.Revision + 1
		}
		return &d, nil // its secrets are sealed as it is asked for
	}, nil
}

// FileDocument is the Document of d for every node: its mesh and node
// replaced by each node's, at the revision after the one stored for it (1
// when none is).
func (c *Client) FileDocument(d *declaration.Declaration) Document {
	return func(ctx context.Context, node string) (*declaration.Declaration, error) {
		stored, err := c.storedFor(ctx, node)
		if err != nil {
			return nil, err
		}
		out := *d
		out.Mesh, out.Node, out.Revision = c.Mesh, node, 1
		if stored != nil {
			out.Revision = stored.Revision + 1
		}
		return &out, nil
	}
}

// plural is n and what, with an s after it unless n is 1: "1 node",
// "2 nodes".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
