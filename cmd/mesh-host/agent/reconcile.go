// Package agent is the reconciler: given what is declared and what the host
// owns, it observes each resource through its driver, plans, journals the
// intent, applies in dependency order and journals every outcome with its
// cause. It holds no state of its own between reconciles: what it knows
// comes in as arguments (from the projection) and goes out as records.
//
// It is not the scheduler of reconciles (the service decides when: pushed,
// start, reconnect, timer) and not a driver (it never touches a file itself).
package agent

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// Appender is the journal as the reconciler uses it.
type Appender interface {
	Append(recs ...event.Record) ([]event.Record, error)
	// AppendDocuments appends recs with docs, which they name by digest,
	// in one transaction.
	AppendDocuments(docs [][]byte, recs ...event.Record) ([]event.Record, error)
}

// MaxInlinePlan bounds the JSON of a plan a reconcile.started carries in
// the record itself. A larger one (about a thousand steps with long paths)
// is stored apart, by digest, in the journal's documents (PlanSHA256), so
// the record stays small whatever the declaration's size: the journal's
// record limit bounds no declaration. A small plan stays inline, as a
// binary before d287606 reads it: a host may roll back to
// one. All plans can go apart once no host can roll back that far.
const MaxInlinePlan = 64 << 10

// Reconciler converges a root to a declaration.
type Reconciler struct {
	Journal Appender
	Drivers map[drivers.Kind]drivers.Driver
	// Root is synced once between staging files and committing them, and
	// once after, so a reconcile's files cost two flushes, not two each.
	Root *rootfs.Root
	// StageBatch is how many steps of a level are staged and committed at
	// a time; 0 for Root.StageBatch, as many as can be staged unnamed.
	StageBatch int
	// Parallel bounds concurrent observes and applies; 0 means 8.
	Parallel int
	// OutcomesPerAppend bounds the outcomes one journal transaction
	// appends; 0 means DefaultOutcomesPerAppend.
	OutcomesPerAppend int
	// Release reports whether an owned resource that is no longer declared
	// is released (disowned and left in place) instead of removed: a host
	// version directory, which the upgrade logic retires, since the
	// running version and its predecessor must outlive the declaration
	// that delivered them. Nil releases nothing.
	Release func(id string) bool
	Log     *slog.Logger
	Now     func() time.Time
}

// Request is one reconcile's input.
type Request struct {
	Trigger event.Trigger
	// Cause is the record that triggered it: the declaration.received for
	// a push or an apply; 0 for start, timer and manual checks.
	Cause    uint64
	Revision uint64
	// Specs are the declaration's resources, with ${version} expanded.
	Specs []drivers.Spec
	// Digests, when not nil, are drivers.SpecDigest of each of Specs, in
	// order: the list journaled with the declaration, which need not be
	// computed again (encoding every spec is much of a no-op check).
	Digests []string
	// Owned is the projection's owned set: what the host may remove, and
	// what it applied before. It is read once, while planning, before
	// anything is journaled; nil for none.
	Owned OwnedSet
	// Repair false observes and journals drift but changes nothing
	// (`check --no-repair`).
	Repair bool
	// DryRun observes and plans, and neither changes nor journals anything
	// (`plan`).
	DryRun bool
	// Owed are the refreshes the projection says are owed, by the ID of
	// the resource owed one (projector.State.Refreshes); nil for none.
	Owed map[string]projector.OwedRefresh
	// Interrupted is the reconcile the projection says was in progress
	// when this one began (projector.State.Pending): one a crash or a
	// kill stopped. The refreshes its planned changes would owe are owed.
	Interrupted *projector.Pending
}

// OwnedSet is an owned set a reconcile walks once: the journal's stored
// projection (hostjournal.StoredOwned), read rather than held, or a map.
type OwnedSet interface {
	EachOwned(fn func(id string, o projector.Owned) error) error
}

// OwnedMap is an owned set held in memory.
type OwnedMap map[string]projector.Owned

// EachOwned calls fn with each owned resource, in no order.
func (m OwnedMap) EachOwned(fn func(id string, o projector.Owned) error) error {
	for id, o := range m {
		if err := fn(id, o); err != nil {
			return err
		}
	}
	return nil
}

// Result is one reconcile's output.
type Result struct {
	Steps []*Step
	// Started is the reconcile.started record's sequence; 0 for a quiet
	// reconcile, which journals only its completion.
	Started   uint64
	Completed uint64
	Changed   int
	Unchanged int
	Failed    int
	// Skipped counts the resources skipped because one they depend on
	// failed.
	Skipped int
	// Refreshes are the refreshes owed in this reconcile, and what
	// delivering each did (a plan: what it would refresh, and why).
	// Refreshed counts those delivered, RefreshFailed those that failed
	// and stay owed.
	Refreshes     []*Refresh
	Refreshed     int
	RefreshFailed int
}

// Failures counts what keeps a reconcile from converging: resources that
// failed, were skipped for a failure, and refreshes that failed.
func (r *Result) Failures() int { return r.Failed + r.Skipped + r.RefreshFailed }

// count counts the steps' outcomes and the refreshes delivered.
func (r *Result) count() {
	for _, s := range r.Steps {
		switch {
		case s.Outcome == Skipped:
			r.Skipped++
		case s.Outcome == event.ActionFailed:
			r.Failed++
		case s.Outcome == event.ActionUnchanged || (s.Outcome == "" && s.Planned == event.ActionUnchanged):
			r.Unchanged++
		case s.Outcome != "":
			r.Changed++
		}
	}
	for _, f := range r.Refreshes {
		switch {
		case f.Err != nil:
			r.RefreshFailed++
		case f.delivered:
			r.Refreshed++
		}
	}
}

// Pending reports whether the plan changes anything.
func (r *Result) Pending() bool {
	for _, s := range r.Steps {
		if s.Planned != event.ActionUnchanged {
			return true
		}
	}
	return false
}

func (rc *Reconciler) parallel() int {
	if rc.Parallel <= 0 {
		return 8
	}
	return rc.Parallel
}

func (rc *Reconciler) outcomesPerAppend() int {
	if rc.OutcomesPerAppend <= 0 {
		return DefaultOutcomesPerAppend
	}
	return rc.OutcomesPerAppend
}

// Reconcile runs one reconcile. Errors of single resources are outcomes in
// the Result, not errors; an error return means the journal could not be
// written or ctx ended. When ctx ended, or the journal takes no record at
// all, the reconcile's completion is not recorded (the next start finishes
// the job); when the journal refused outcomes after the start, a failed
// completion is journaled with the reason.
func (rc *Reconciler) Reconcile(ctx context.Context, req Request) (*Result, error) {
	started := rc.Now().UTC()
	steps, err := rc.plan(ctx, req)
	if err != nil {
		return nil, err
	}
	res := &Result{Steps: steps}
	related := relate(steps)
	owed := rc.owedRefreshes(steps, req)
	if req.DryRun {
		res.Refreshes = owed.plan(steps)
		foreseeSkips(steps)
		return res, nil
	}
	if !req.Repair {
		// A check that repairs nothing refreshes nothing: what is owed
		// stays owed.
		owed = &refreshes{byTarget: map[string]*Refresh{}, now: rc.Now}
	}

	// Drift first: it is the cause of the repairs that follow.
	if err := rc.journalDrift(steps, req); err != nil {
		return res, err
	}
	changes := slices.ContainsFunc(steps, func(s *Step) bool {
		return s.Planned != event.ActionUnchanged && (req.Repair || !s.Drift)
	})
	record := slices.ContainsFunc(steps, needsRecord)
	if !changes && !record && !owed.pending() {
		// Nothing to change and nothing new to remember: one small record,
		// so a quiet machine's journal stays small. (Drift left unrepaired
		// was journaled above and is not quiet.)
		quiet := !slices.ContainsFunc(steps, func(s *Step) bool { return s.Drift })
		return res, rc.complete(res, req, started, req.Cause, quiet, nil)
	}

	recs, err := rc.journalStarted(req, planned(steps), owed.interrupted)
	if err != nil {
		return res, fmt.Errorf("journal reconcile intent: %w", err)
	}
	res.Started = recs[0].Seq
	res.Refreshes = owed.order

	// A level's outcomes are journaled before the next level acts, and
	// the last level's with the completion, in one commit: a push that
	// changes one file commits its outcome and its end together.
	r := &run{rc: rc, req: req, res: res, started: started, owed: owed}
	for _, level := range rc.order(steps, related) {
		if err := r.level(ctx, level); err != nil {
			return res, err
		}
	}
	res.Refreshes = owed.order
	return res, rc.complete(res, req, started, res.Started, false, &r.held)
}

// planned is the plan a reconcile.started carries: every step that
// changes something.
func planned(steps []*Step) []event.Step {
	var plan []event.Step
	for _, s := range steps {
		if s.Planned != event.ActionUnchanged {
			plan = append(plan, event.Step{Resource: s.ID, Action: s.Planned})
		}
	}
	return plan
}

// run is a reconcile from its journaled start to its end: what it holds
// between the levels it applies.
type run struct {
	rc      *Reconciler
	req     Request
	res     *Result
	started time.Time
	owed    *refreshes
	// held are the outcomes not yet journaled.
	held outcomes
}

// level applies one level of steps, once what the levels before it did
// is journaled, and delivers the refreshes due to its resources. A level
// with nothing to apply journals nothing yet: its outcomes wait for the
// next level's, or the completion.
func (r *run) level(ctx context.Context, level []*Step) error {
	todo := todo(level, r.req.Repair)
	if err := ctx.Err(); err != nil || len(todo) > 0 {
		if jerr := r.journalHeld(); jerr != nil {
			return jerr
		}
		if err != nil {
			return err
		}
		if err := r.applyJournalingAhead(ctx, todo); err != nil {
			return err
		}
	}
	r.held.add(outcomesOf(level, r.res.Started))
	return r.refresh(ctx, level)
}

// todo are the steps of level to apply. The others' outcomes are settled
// here: unchanged, drift left as it is (no repair), or skipped because a
// step they depend on failed.
func todo(level []*Step, repair bool) []*Step {
	var todo []*Step
	for _, s := range level {
		switch {
		case s.Planned == event.ActionUnchanged:
			s.Outcome = event.ActionUnchanged
		case s.Drift && !repair:
			s.Outcome = "" // observed, journaled, left as it is
		default:
			if dep := failedDep(s); dep != nil {
				s.skip(dep)
				continue
			}
			todo = append(todo, s)
		}
	}
	return todo
}

// journalHeld journals the outcomes held. One the journal refuses ends
// the reconcile early.
func (r *run) journalHeld() error {
	if _, err := r.rc.journalOutcomes(&r.held); err != nil {
		return r.rc.endEarly(r.res, r.req, r.started, err)
	}
	return nil
}

// applyJournalingAhead applies todo, journaling the outcomes each flush
// makes durable while the rest are applied (ahead).
func (r *run) applyJournalingAhead(ctx context.Context, todo []*Step) error {
	ahead := r.rc.journalAhead(r.res.Started)
	r.rc.apply(ctx, todo, ahead.add)
	if err := ahead.wait(); err != nil {
		return r.rc.endEarly(r.res, r.req, r.started, err)
	}
	return nil
}

// refresh owes the refreshes of level's changes and delivers those due
// to level's resources, whose sources were all applied before them.
func (r *run) refresh(ctx context.Context, level []*Step) error {
	r.owed.owe(level)
	due := r.owed.due(level)
	if len(due) == 0 {
		return nil
	}
	// The changes that owe these refreshes are journaled, with their
	// refresh.owed, before any is delivered: a kill from here on leaves
	// them owed.
	if err := r.journalHeld(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, f := range due {
		r.held.extra = append(r.held.extra, r.rc.deliver(ctx, r.owed, f, r.res.Started)...)
	}
	return nil
}

// driverOf is the driver of s's kind; nil when there is none.
func (rc *Reconciler) driverOf(s *Step) drivers.Driver {
	kind, _, _ := drivers.SplitID(s.ID)
	return rc.Drivers[kind]
}

func (rc *Reconciler) driver(id string) (drivers.Driver, error) {
	kind, _, _ := drivers.SplitID(id)
	d, ok := rc.Drivers[kind]
	if !ok {
		return nil, fmt.Errorf("no driver for %s resources", kind)
	}
	return d, nil
}

// each runs fn over steps with at most Parallel at once. A fixed set of
// workers takes the steps in turn: a goroutine a step would start ten
// thousand goroutines for a large declaration, and grow each one's stack
// from nothing, time spent copying stacks.
func (rc *Reconciler) each(ctx context.Context, steps []*Step, fn func(context.Context, *Step)) error {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(rc.parallel(), len(steps)) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(len(steps)) {
					return
				}
				fn(ctx, steps[i])
			}
		})
	}
	wg.Wait()
	return ctx.Err()
}
