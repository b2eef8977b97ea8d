package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// This file is the refreshes: a unit restarted or reloaded, an exec run,
// because a resource that notifies it changed. A refresh that is owed is
// a fact in the journal (refresh.owed), written in the transaction that
// journals the change that owes it, and it stays in the projection until
// a refresh.done: a reconcile that fails after the change, a kill at any
// instant, a new host version, or a declaration that no longer changes
// the source cannot lose it. Every reconcile delivers what is owed, once
// a target, after every source has finished (its sources are applied
// before it), and journals what it did.

// maxRefreshError bounds the error a refresh.failed carries: a unit's
// last journal lines and the manager's words, not a log.
const maxRefreshError = 8 << 10

// Refresh is a refresh a reconcile owes a resource, and what delivering
// it did.
type Refresh struct {
	// Target is the resource refreshed; How what refreshing it does
	// (restart, reload, reload-or-restart, run).
	Target string
	How    string
	// Sources are the changes that owe it, in the order they were owed.
	Sources []string
	// Why says, for a plan, why it is owed: "file:/etc/app.conf would
	// change", "owed since #12".
	Why []string
	// Since is when the first change that owes it was made: a resource
	// that restarted after it needs no refresh.
	Since time.Time
	// Did is what delivering it did ("restarted", "ran"), Note why it
	// did nothing, Err why it failed (the refresh stays owed); Seq is
	// the refresh.done or refresh.failed.
	Did, Note string
	Err       error
	Seq       uint64

	step *Step
	// delivered: tried in this reconcile, done or failed.
	delivered bool
}

// refreshes are the refreshes a reconcile owes, by target.
type refreshes struct {
	byTarget map[string]*Refresh
	order    []*Refresh
	// interrupted are the refresh.owed records of the changes an
	// interrupted reconcile planned and did not journal (see
	// owedByInterrupted): journaled with this reconcile's start.
	interrupted []event.Record
	now         func() time.Time
}

// owedRefreshes gathers what the reconcile owes when it starts: the
// projection's owed refreshes of declared resources, and those an
// interrupted reconcile may have owed without journaling them.
func (rc *Reconciler) owedRefreshes(steps []*Step, req Request) *refreshes {
	r := &refreshes{byTarget: make(map[string]*Refresh), now: rc.Now}
	if len(req.Owed) == 0 && (req.Interrupted == nil || len(req.Interrupted.Plan) == 0) {
		return r
	}
	byID := make(map[string]*Step, len(steps))
	for _, s := range steps {
		if s.Spec != nil {
			byID[s.ID] = s
		}
	}
	for _, id := range slices.Sorted(maps.Keys(req.Owed)) {
		t := byID[id]
		if t == nil {
			continue // no longer declared: the declaration's fold dropped it
		}
		o := req.Owed[id]
		f := r.target(t, o.Since)
		for _, src := range o.Sources {
			f.Sources = append(f.Sources, src.Resource)
		}
		f.Why = append(f.Why, fmt.Sprintf("owed since #%d: %s", o.Seq, describeSources(f.Sources, o.More)))
	}
	r.owedByInterrupted(req.Interrupted, byID)
	return r
}

// owedByInterrupted owes, for a reconcile that stopped between planning a
// change and journaling its outcome (a crash, a kill), the refreshes the
// change would have owed: whether it was made is not known, and a
// refresh too many is better than one lost. A source whose outcome was
// journaled after that reconcile began owed its refreshes with it.
func (r *refreshes) owedByInterrupted(p *projector.Pending, byID map[string]*Step) {
	if p == nil {
		return
	}
	for _, planned := range p.Plan {
		if planned.Action != event.ActionCreate && planned.Action != event.ActionUpdate {
			continue
		}
		src := byID[planned.Resource]
		if src == nil || len(src.notifies) == 0 || (src.owned != nil && src.owned.seq > p.Seq) {
			continue
		}
		for _, t := range src.notifies {
			f := r.target(t, r.now().UTC())
			f.Sources = append(f.Sources, src.ID)
			f.Why = append(f.Why, fmt.Sprintf("the reconcile at #%d stopped after planning to change %s", p.Seq, src.ID))
			r.interrupted = append(r.interrupted, event.New(event.RefreshOwed, p.Seq, t.ID, event.RefreshOwedPayload{
				Source: src.ID, Change: planned.Action, Refresh: howOf(t.Spec), Interrupted: p.Seq,
			}))
		}
	}
}

// target returns the refresh owed to t, making it owed since since.
func (r *refreshes) target(t *Step, since time.Time) *Refresh {
	if f := r.byTarget[t.ID]; f != nil {
		return f
	}
	f := &Refresh{Target: t.ID, How: howOf(t.Spec), Since: since, step: t}
	r.byTarget[t.ID] = f
	r.order = append(r.order, f)
	return f
}

// pending reports whether anything is owed.
func (r *refreshes) pending() bool { return len(r.order) > 0 }

// owe owes the refreshes of a level's changes, in memory: their records
// are journaled with the changes' outcomes (outcomeRecords).
func (r *refreshes) owe(level []*Step) {
	for _, s := range level {
		if len(s.notifies) == 0 || !changed(s.Outcome) {
			continue
		}
		for _, t := range s.notifies {
			f := r.target(t, r.now().UTC())
			if !slices.Contains(f.Sources, s.ID) {
				f.Sources = append(f.Sources, s.ID)
			}
		}
	}
}

// changed reports whether an outcome changed the resource, which owes
// the refreshes it notifies.
func changed(a event.Action) bool { return a == event.ActionCreate || a == event.ActionUpdate }

// due are the refreshes owed to the resources of level that can be
// delivered now: not to a resource whose own apply failed or was
// skipped, whose refresh stays owed.
func (r *refreshes) due(level []*Step) []*Refresh {
	if len(r.order) == 0 {
		return nil
	}
	var out []*Refresh
	for _, s := range level {
		f := r.byTarget[s.ID]
		if f == nil || f.delivered || s.Outcome == event.ActionFailed || s.Outcome == Skipped {
			continue
		}
		out = append(out, f)
	}
	return out
}

// deliver refreshes f's target through its driver and returns the
// record of what it did, and the refresh.owed records of what the
// refresh owes in turn: a refresh that did something (a unit restarted,
// an exec run) is a change to what it notifies.
func (rc *Reconciler) deliver(ctx context.Context, r *refreshes, f *Refresh, start uint64) []event.Record {
	f.delivered = true
	d, err := rc.driver(f.Target)
	var done drivers.Refreshed
	if err == nil {
		refresher, ok := d.(drivers.Refresher)
		if !ok {
			err = fmt.Errorf("%s cannot be refreshed: its driver does not refresh", f.Target)
		} else {
			done, err = refresher.Refresh(ctx, f.step.Spec, f.Since)
		}
	}
	sources := boundedSources(f.Sources)
	if err != nil {
		f.Err = err
		return []event.Record{event.New(event.RefreshFailed, start, f.Target, event.RefreshFailedPayload{
			Error: bounded(err.Error(), maxRefreshError), Sources: sources,
		})}
	}
	f.Did, f.Note = done.Did, done.Note
	recs := []event.Record{event.New(event.RefreshDone, start, f.Target, event.RefreshDonePayload{Did: done.Did, Note: done.Note, Sources: sources})}
	if done.Did == "" {
		return recs
	}
	for _, t := range f.step.notifies {
		g := r.target(t, rc.Now().UTC())
		if !slices.Contains(g.Sources, f.Target) {
			g.Sources = append(g.Sources, f.Target)
		}
		recs = append(recs, event.New(event.RefreshOwed, start, t.ID, event.RefreshOwedPayload{
			Source: f.Target, Change: refreshedChange, Refresh: howOf(t.Spec),
		}))
	}
	return recs
}

// refreshedChange is the change a refresh that did something makes to
// what it notifies (a refresh.owed's Change).
const refreshedChange event.Action = "refreshed"

// owedRecords are the refresh.owed records a step's outcome owes:
// journaled with that outcome.
func owedRecords(s *Step, start uint64) []event.Record {
	if len(s.notifies) == 0 || !changed(s.Outcome) {
		return nil
	}
	recs := make([]event.Record, 0, len(s.notifies))
	for _, t := range s.notifies {
		recs = append(recs, event.New(event.RefreshOwed, start, t.ID, event.RefreshOwedPayload{
			Source: s.ID, Change: s.Outcome, Repair: s.DriftSeq != 0, Refresh: howOf(t.Spec),
		}))
	}
	return recs
}

// plan says what a reconcile would refresh and why, changing nothing:
// what is owed, and what the planned changes would owe.
func (r *refreshes) plan(steps []*Step) []*Refresh {
	for _, s := range steps {
		if len(s.notifies) == 0 || (s.Planned != event.ActionCreate && s.Planned != event.ActionUpdate) || s.Err != nil {
			continue // a change foreseen to fail owes nothing
		}
		for _, t := range s.notifies {
			f := r.target(t, time.Time{})
			f.Sources = append(f.Sources, s.ID)
			f.Why = append(f.Why, fmt.Sprintf("%s would be %s", s.ID, s.Planned))
		}
	}
	return r.order
}

// howOf is what refreshing spec's resource does (drivers.Refreshable).
func howOf(spec drivers.Spec) string {
	if r, ok := spec.(drivers.Refreshable); ok {
		return r.HowRefreshed()
	}
	return "refresh"
}

// boundedSources are at most projector.MaxRefreshSources of sources.
func boundedSources(sources []string) []string {
	return sources[:min(len(sources), projector.MaxRefreshSources)]
}

// describeSources names the changes that owe a refresh: "file:/a and
// file:/b changed", with a count of those past the first few.
func describeSources(sources []string, more int) string {
	const shown = 3
	if len(sources) == 0 {
		return "a change"
	}
	s := sources[0]
	for i, src := range sources[1:min(len(sources), shown)] {
		if i == len(sources)-2 && more == 0 {
			s += " and " + src
		} else {
			s += ", " + src
		}
	}
	if rest := max(0, len(sources)-shown) + more; rest > 0 {
		s += fmt.Sprintf(" and %d more", rest)
	}
	return s + " changed"
}

// bounded cuts s to at most n bytes, keeping its end, where a tool puts
// the reason it stopped, on a character boundary.
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := len(s) - n
	for cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut++
	}
	return "…" + s[cut:]
}
