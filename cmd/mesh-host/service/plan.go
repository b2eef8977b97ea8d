package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// A plan holds the reconcile lock while it observes, so that it sees the
// machine between applies, never in the middle of one. These bound what
// that costs the reconcile loop and the asker.
const (
	// planLockWait is how long a plan request waits for an apply in flight
	// to end before it is answered busy.
	planLockWait = 5 * time.Second
	// planTimeout bounds one plan: the reconcile loop waits at most this
	// long for it.
	planTimeout = 30 * time.Second
	// lockPoll is how often a plan looks whether the apply ended.
	lockPoll = 10 * time.Millisecond
)

// Plan answers a plan request from the link: the declaration it carries
// is planned against the machine as `mesh-host plan` plans it (Config.Plan),
// nothing is changed, and one plan.answered record is journaled, whether
// a plan was made or the declaration would be refused. A request that
// finds an apply in flight for longer than planLockWait, or the host
// standing aside, is answered busy and journals nothing.
func (h *LinkHost) Plan(ctx context.Context, p *linkproto.PlanRequest) linkproto.PlanAnswer {
	a := linkproto.PlanAnswer{Protocol: linkproto.ProtocolVersion, Node: p.Node, Revision: p.Revision}
	// The link verified the signature; a request reaching here without
	// one is a bug that must not become a journaled fact.
	if p.Signature == "" {
		a.Refused = fmt.Sprintf("revision %d: %v: the link passed an unsigned plan request", p.Revision, linkproto.ErrUnsigned)
		return a
	}
	decl, err := declaration.ParseJSON("link", p.Document)
	if err == nil && (decl.Mesh != p.Mesh || decl.Node != p.Node || decl.Revision != p.Revision) {
		err = fmt.Errorf("the document is revision %d for %s/%s, the message revision %d for %s/%s",
			decl.Revision, decl.Mesh, decl.Node, p.Revision, p.Mesh, p.Node)
	}
	if err != nil {
		return h.answered(a, p, nil, nil, err)
	}
	if !lockWithin(ctx, &h.held.Reconciling, planLockWait) {
		a.Refused, a.Busy = fmt.Sprintf("busy: an apply has been in flight for over %s; ask again", planLockWait), true
		return a
	}
	defer h.held.Reconciling.Unlock()
	if h.held.StandingAside {
		a.Refused, a.Busy = "busy: the host is standing aside for a newer version; ask again once it is back", true
		return a
	}
	if h.plan == nil {
		return h.answered(a, p, decl, nil, fmt.Errorf("this host makes no plans"))
	}
	pctx, cancel := context.WithTimeout(ctx, planTimeout)
	defer cancel()
	res, err := h.plan(pctx, h.held.Journal, decl)
	return h.answered(a, p, decl, res, err)
}

// answered fills a with the plan res (or the refusal err), journals it as
// plan.answered, and returns it.
func (h *LinkHost) answered(a linkproto.PlanAnswer, p *linkproto.PlanRequest, decl *declaration.Declaration, res *Planned, err error) linkproto.PlanAnswer {
	rec := event.PlanAnsweredPayload{Revision: p.Revision, Operator: p.Operator}
	if decl != nil {
		rec.Digest = decl.Digest()
	}
	if err != nil {
		a.Refused, rec.Refused = err.Error(), err.Error()
	} else {
		a.Steps, a.Unchanged = planSteps(res)
		for _, s := range res.Steps {
			switch {
			case s.Err != nil:
				rec.Failed++
			case s.Planned == event.ActionCreate:
				rec.Create++
			case s.Planned == event.ActionUpdate:
				rec.Update++
			case s.Planned == event.ActionDelete:
				rec.Delete++
			case s.Planned == event.ActionReleased:
				rec.Released++
			default:
				rec.Unchanged++
			}
		}
	}
	recs, jerr := h.held.Journal.Append(event.New(event.PlanAnswered, 0, "", rec))
	if jerr != nil {
		a.Steps, a.Unchanged = nil, 0
		a.Refused = fmt.Sprintf("journal the plan: %v", jerr)
		return a
	}
	a.Seq = recs[0].Seq
	return a
}

// planSteps is res as a plan answer carries it: the steps that change
// something or met an error, in order, each with what it would make the
// resource and its content diff, and how many are unchanged.
func planSteps(res *Planned) (steps []linkproto.PlanStep, unchanged int) {
	for _, s := range res.Steps {
		if s.Planned == event.ActionUnchanged && s.Err == nil {
			unchanged++
			continue
		}
		ps := linkproto.PlanStep{ID: s.ID, Action: s.Planned, Drift: s.Drift, Note: s.Note, Diff: linkproto.ClipDiff(res.Diffs[s.ID])}
		if s.Spec != nil {
			ps.Digest = drivers.SpecDigest(unsealed(s.Spec))
		}
		if s.Planned != event.ActionCreate {
			ps.Differs = s.Observation.Differs
		}
		if s.Err != nil {
			ps.Error = s.Err.Error()
		}
		steps = append(steps, ps)
	}
	// What the plan would refresh, as steps whose action is the refresh
	// (restart, reload, run) and whose note says why.
	for _, f := range res.Refreshes {
		steps = append(steps, linkproto.PlanStep{ID: f.Target, Action: event.Action(f.How), Note: "refresh: " + strings.Join(f.Why, "; ")})
	}
	return steps, unchanged
}

// unsealed is spec with each secret named only: its sealed form is sealed
// to one node, and would make the same declaration differ on every node.
// The name is what the declaration says; it is not copied when there is
// no secret.
func unsealed(spec drivers.Spec) drivers.Spec {
	switch s := spec.(type) {
	case *drivers.FileSpec:
		if s.Secret != nil {
			c := *s
			c.Secret = &drivers.Secret{Name: s.Secret.Name}
			return &c
		}
	case *drivers.UserSpec:
		if s.Password != nil {
			c := *s
			c.Password = &drivers.Secret{Name: s.Password.Name}
			return &c
		}
	}
	return spec
}

// lockWithin takes mu, waiting at most wait (and not past ctx); it reports
// whether it holds it. The mutex is the reconcile lock, which has no
// waiting with a deadline, so it is polled.
func lockWithin(ctx context.Context, mu *sync.Mutex, wait time.Duration) bool {
	if mu.TryLock() {
		return true
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	t := time.NewTicker(lockPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return mu.TryLock()
		case <-t.C:
			if mu.TryLock() {
				return true
			}
		}
	}
}

// Planned is a plan made for the control plane: the reconciler's dry run
// and, by resource id, the content diff of each file it would change, as
// mesh-host plan prints it.
type Planned struct {
	*agent.Result
	Diffs map[string]string
}

// planFunc is Config.Plan.
type planFunc = func(ctx context.Context, j *journal.Journal, d *declaration.Declaration) (*Planned, error)
