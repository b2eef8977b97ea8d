package link

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/linkproto"
)

// plansPerMinute bounds the plans made, and so the plan.answered records
// journaled, in a minute: an operator's `meshctl plan` asks once.
const plansPerMinute = 30

// onPlan handles a plan request. It is checked as a push is (for this
// node, signed by the mesh, here for planning); one is planned at a time,
// and one arriving meanwhile is answered busy at once rather than queued
// behind it: the asker has a deadline, and asks again if it wants to.
func (l *Link) onPlan(ctx context.Context, m *nats.Msg) {
	p, err := l.decodePlan(m.Data)
	if err != nil {
		revision := uint64(0)
		if p != nil {
			revision = p.Revision
		}
		l.refuse(m.Subject, err.Error(), len(m.Data))
		l.replyPlan(m, l.refusedPlan(revision, err.Error(), false))
		return
	}
	select {
	case l.planning <- struct{}{}:
	default:
		l.replyPlan(m, l.refusedPlan(p.Revision, "busy: another plan is being made; ask again", true))
		return
	}
	if !l.planRate.admit(l.cfg.Now()) {
		// A signed request replayed by the broker would otherwise add a
		// record to the journal each time.
		<-l.planning
		l.log.Warn("plan requests over the rate; answered busy", "revision", p.Revision, "per_minute", plansPerMinute)
		l.replyPlan(m, l.refusedPlan(p.Revision, fmt.Sprintf("busy: more than %d plan requests this minute; ask again later", plansPerMinute), true))
		return
	}
	l.plans.Go(func() {
		// Answered once the slot is free again: an asker who asks again
		// on the answer finds it free.
		l.replyPlan(m, l.makePlan(ctx, p))
	})
}

// makePlan plans p, holding the planning slot until it returns.
func (l *Link) makePlan(ctx context.Context, p *linkproto.PlanRequest) (a linkproto.PlanAnswer) {
	defer func() { <-l.planning }()
	defer func() {
		if r := recover(); r != nil {
			reason := fmt.Sprintf("internal error making the plan: %v", r)
			l.log.Error("plan handler panicked", "panic", r, "stack", string(debug.Stack()))
			a = l.refusedPlan(p.Revision, reason, false)
		}
	}()
	a = l.host.Plan(ctx, p)
	a.Protocol, a.Node, a.Revision = linkproto.ProtocolVersion, l.cfg.Node, p.Revision
	a.Refused = clip(a.Refused, maxReason)
	a.Fit()
	l.log.Info("plan asked", "revision", p.Revision, "steps", len(a.Steps), "omitted", a.Omitted, "seq", a.Seq, "refused", a.Refused)
	return a
}

// planLimiter admits plansPerMinute plan requests a minute.
type planLimiter struct {
	mu     sync.Mutex
	window time.Time // start of the current minute
	n      int       // admitted in the current minute
}

func (r *planLimiter) admit(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.window) >= time.Minute || now.Before(r.window) {
		r.window, r.n = now, 0
	}
	if r.n >= plansPerMinute {
		return false
	}
	r.n++
	return true
}

// decodePlan decodes a plan request for this node and checks that the
// mesh signed it for planning.
func (l *Link) decodePlan(data []byte) (*linkproto.PlanRequest, error) {
	p, err := linkproto.DecodePlanRequest(data, l.cfg.Mesh, l.cfg.Node)
	if err != nil {
		return nil, fmt.Errorf("plan request: %w", err)
	}
	if err := p.Verify(l.cfg.Trust); err != nil {
		return p, fmt.Errorf("plan request for revision %d refused: %w", p.Revision, err)
	}
	return p, nil
}

func (l *Link) refusedPlan(revision uint64, reason string, busy bool) linkproto.PlanAnswer {
	return linkproto.PlanAnswer{Protocol: linkproto.ProtocolVersion, Node: l.cfg.Node, Revision: revision, Refused: clip(reason, maxReason), Busy: busy}
}

func (l *Link) replyPlan(m *nats.Msg, a linkproto.PlanAnswer) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(linkproto.Marshal(a)); err != nil {
		l.log.Warn("answer a plan request", "revision", a.Revision, "err", err)
	}
}
