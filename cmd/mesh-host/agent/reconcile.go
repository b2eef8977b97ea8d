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
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
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
// record limit bounds no declaration. A small plan stays inline, as an
// older binary reads it.
const MaxInlinePlan = 64 << 10

// Reconciler converges a root to a declaration.
type Reconciler struct {
	Journal Appender
	Drivers map[drivers.Kind]drivers.Driver
	// Root is synced once between staging files and committing them, and
	// once after, so a reconcile's files cost two flushes, not two each.
	Root *drivers.Root
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
	// computed again (encoding every spec is a third of a no-op check).
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

// ownedAs is what the projection said of a declared resource the host
// owned when the reconcile began: what a step needs of projector.Owned.
type ownedAs struct {
	digest  string // its SpecDigest
	failed  bool   // its last outcome failed
	drifted bool
	seq     uint64 // its last outcome's record
}

// Step is one resource's part in a reconcile.
type Step struct {
	ID   string
	Spec drivers.Spec // nil for a removal
	// Digest is drivers.SpecDigest(Spec), computed once.
	Digest string
	// Planned is what the plan said: created, updated, deleted, unchanged.
	Planned event.Action
	// Observation is what was seen before anything changed.
	Observation drivers.Observation
	// Drift is set when an owned resource, applied with this very spec, no
	// longer matches it: a change the mesh did not make.
	Drift bool
	// Outcome and Err are what applying did; Outcome is failed when Err is
	// set.
	Outcome event.Action
	Err     error
	// Note is the driver's remark on the outcome ("enablement only").
	Note string
	// DriftSeq is the drift.observed record's sequence, the repair's cause.
	DriftSeq uint64
	// Seq is the outcome's journal sequence (0 when none was journaled).
	Seq uint64
	// SkippedFor names the resource whose failure (or skip) this one
	// waited for, when its Outcome is Skipped.
	SkippedFor string
	// IDs are the ids the resource holds after its apply (a user's uid:
	// drivers.Numbered), journaled with its outcome.
	IDs []event.HeldID
	// owned is the projection's word on a declared resource the host
	// owned; nil when it did not.
	owned *ownedAs
	// deps are the steps applied before this one by its relations, and
	// notifies those its change owes a refresh (relate).
	deps, notifies []*Step
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

	var plan []event.Step
	for _, s := range steps {
		if s.Planned != event.ActionUnchanged {
			plan = append(plan, event.Step{Resource: s.ID, Action: s.Planned})
		}
	}
	recs, err := rc.journalStarted(req, plan, owed.interrupted)
	if err != nil {
		return res, fmt.Errorf("journal reconcile intent: %w", err)
	}
	res.Started = recs[0].Seq
	res.Refreshes = owed.order

	order := levels
	if related {
		order = relatedLevels
	}
	// A level's outcomes are journaled before the next level acts, and
	// the last level's with the completion, in one commit: a push that
	// changes one file commits its outcome and its end together.
	var held outcomes
	for _, level := range order(steps) {
		var todo []*Step
		for _, s := range level {
			switch {
			case s.Planned == event.ActionUnchanged:
				s.Outcome = event.ActionUnchanged
			case s.Drift && !req.Repair:
				s.Outcome = "" // observed, journaled, left as it is
			default:
				if dep := failedDep(s); dep != nil {
					s.skip(dep)
					continue
				}
				todo = append(todo, s)
			}
		}
		err := ctx.Err()
		if err == nil && len(todo) == 0 {
			held.add(outcomesOf(level, res.Started))
		} else {
			if _, jerr := rc.journalOutcomes(&held); jerr != nil {
				return res, rc.endEarly(res, req, started, jerr)
			}
			if err != nil {
				return res, err
			}
			ahead := rc.journalAhead(res.Started)
			rc.apply(ctx, todo, ahead.add)
			if jerr := ahead.wait(); jerr != nil {
				return res, rc.endEarly(res, req, started, jerr)
			}
			held.add(outcomesOf(level, res.Started))
		}
		owed.owe(level)
		if due := owed.due(level); len(due) > 0 {
			// The changes that owe these refreshes are journaled, with
			// their refresh.owed, before any is delivered: a kill from
			// here on leaves them owed.
			if _, jerr := rc.journalOutcomes(&held); jerr != nil {
				return res, rc.endEarly(res, req, started, jerr)
			}
			if err := ctx.Err(); err != nil {
				return res, err
			}
			for _, f := range due {
				held.extra = append(held.extra, rc.deliver(ctx, owed, f, res.Started)...)
			}
		}
	}
	res.Refreshes = owed.order
	return res, rc.complete(res, req, started, res.Started, false, &held)
}

// foreseeSkips notes, in a plan, the steps that would be skipped because
// a step they depend on is foreseen to fail.
func foreseeSkips(steps []*Step) {
	for _, s := range steps {
		for _, d := range s.deps {
			if d.Err != nil && d.Planned != event.ActionUnchanged && s.Planned != event.ActionUnchanged {
				s.Note = fmt.Sprintf("would be skipped: %s would fail", d.ID)
				break
			}
		}
	}
}

// endEarly ends a reconcile whose outcomes the journal did not take (a
// record it refused, a full disk) as failed, rather than leave it in
// progress for every later start to meet the same refusal. If the journal
// takes nothing more, it stays in progress.
func (rc *Reconciler) endEarly(res *Result, req Request, started time.Time, err error) error {
	if cerr := rc.completeEarly(res, req, started, err); cerr != nil {
		return errors.Join(err, cerr)
	}
	return err
}

// journalStarted appends the reconcile.started of plan, the plan stored
// apart when it is over MaxInlinePlan;
// more are appended with it, in its transaction.
func (rc *Reconciler) journalStarted(req Request, plan []event.Step, more []event.Record) ([]event.Record, error) {
	p := event.ReconcileStartedPayload{Trigger: req.Trigger, Revision: req.Revision, Plan: plan}
	list, err := json.Marshal(plan)
	if err != nil {
		return nil, err
	}
	if len(list) <= MaxInlinePlan {
		return rc.Journal.Append(append([]event.Record{event.New(event.ReconcileStarted, req.Cause, "", p)}, more...)...)
	}
	p.Plan, p.PlanSHA256 = nil, journal.FormatSum(journal.SumOf(list))
	return rc.Journal.AppendDocuments([][]byte{list}, append([]event.Record{event.New(event.ReconcileStarted, req.Cause, "", p)}, more...)...)
}

// completeEarly journals the end of a reconcile that failed after its start
// was journaled, with the reason.
func (rc *Reconciler) completeEarly(res *Result, req Request, started time.Time, reason error) error {
	recs, err := rc.Journal.Append(event.New(event.ReconcileCompleted, res.Started, "", event.ReconcileCompletedPayload{
		Trigger: req.Trigger, Revision: req.Revision, Result: event.ResultFailed, Started: started, Error: reason.Error(),
	}))
	if err != nil {
		return fmt.Errorf("journal the reconcile's end: %w", err)
	}
	res.Completed = recs[0].Seq
	return nil
}

// needsRecord: an unchanged resource is journaled only when the journal
// does not already say the host owns it with this spec.
func needsRecord(s *Step) bool {
	if s.Planned != event.ActionUnchanged {
		return false
	}
	o := s.owned
	return o == nil || o.digest != s.Digest || o.failed
}

// plan observes every declared resource and every owned one no longer
// declared, in parallel, and decides what each needs.
func (rc *Reconciler) plan(ctx context.Context, req Request) ([]*Step, error) {
	declared := make(map[string]*Step, len(req.Specs))
	steps := make([]*Step, 0, len(req.Specs))
	if req.Digests != nil && len(req.Digests) != len(req.Specs) {
		return nil, fmt.Errorf("%d spec digests for %d specs", len(req.Digests), len(req.Specs))
	}
	for i, spec := range req.Specs {
		id := drivers.ID(spec)
		s := &Step{ID: id, Spec: spec}
		if req.Digests != nil {
			s.Digest = req.Digests[i]
		}
		declared[id] = s
		steps = append(steps, s)
	}
	if req.Owned != nil {
		err := req.Owned.EachOwned(func(id string, o projector.Owned) error {
			switch s := declared[id]; {
			case s != nil:
				s.owned = &ownedAs{digest: o.SpecDigest, failed: o.LastOutcome == event.ActionFailed, drifted: o.Drifted, seq: o.Seq}
			case rc.Release != nil && rc.Release(id):
				steps = append(steps, &Step{ID: id, Planned: event.ActionReleased})
			default:
				steps = append(steps, &Step{ID: id, Planned: event.ActionDelete})
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("read the owned resources: %w", err)
		}
	}
	err := rc.each(ctx, steps, func(ctx context.Context, s *Step) {
		if s.Spec == nil {
			return // removals need no observation: Remove of absent succeeds
		}
		if s.Digest == "" {
			s.Digest = drivers.SpecDigest(s.Spec)
		}
		d, err := rc.driver(s.ID)
		if err == nil {
			s.Observation, err = d.Observe(ctx, s.Spec)
		}
		switch {
		case err != nil:
			s.Planned, s.Err = event.ActionUpdate, fmt.Errorf("observe: %w", err)
		case s.Observation.InSync:
			// Before Exists: a package declared absent is in sync when
			// it does not exist.
			s.Planned = event.ActionUnchanged
		case !s.Observation.Exists:
			s.Planned = event.ActionCreate
		default:
			s.Planned = event.ActionUpdate
		}
		if o := s.owned; o != nil && s.Planned != event.ActionUnchanged && s.Err == nil &&
			o.digest == s.Digest && !o.failed {
			s.Drift = true
		}
		if s.Planned != event.ActionUnchanged {
			// What the driver saw that a plan should say: why an exec
			// would run, what a unit's apply cannot do here.
			s.Note = s.Observation.Note
		}
	})
	if err == nil {
		rc.foreseeReleases(ctx, steps)
		rc.foreseeMissingParents(steps)
	}
	slices.SortStableFunc(steps, func(a, b *Step) int { return strings.Compare(a.ID, b.ID) })
	return steps, err
}

// foreseeReleases plans as released the removals that their driver would
// leave in place (drivers.Leaver): a directory no longer declared that
// will still hold something once this reconcile has removed what it
// removes and laid down what it declares. The apply then releases it as
// planned, and a plan says so rather than "deleted". Deepest first, so
// that a directory left in place keeps its parent. A removal that
// foresight gets wrong is still released when Remove finds it so.
func (rc *Reconciler) foreseeReleases(ctx context.Context, steps []*Step) {
	leaver, ok := rc.Drivers[drivers.KindDirectory].(drivers.Leaver)
	if !ok {
		return
	}
	type removal struct {
		step *Step
		path string
	}
	gone := make(map[string]bool)
	var declared []string // sorted below: what is beneath a path is found by search
	var dirs []removal
	for _, s := range steps {
		p := rc.pathOf(s)
		switch {
		case p == "":
		case s.Spec != nil:
			declared = append(declared, p)
		case s.Planned == event.ActionDelete:
			gone[p] = true
			if kind, _, _ := drivers.SplitID(s.ID); kind == drivers.KindDirectory {
				dirs = append(dirs, removal{s, p})
			}
		}
	}
	if len(dirs) == 0 {
		return
	}
	slices.Sort(declared)
	slices.SortFunc(dirs, func(a, b removal) int { return depth(b.path) - depth(a.path) })
	for _, d := range dirs {
		why := ""
		if i, _ := slices.BinarySearch(declared, d.path+"/"); i < len(declared) && strings.HasPrefix(declared[i], d.path+"/") {
			why = fmt.Sprintf("it holds %s, which is declared", declared[i])
		} else {
			spec, err := drivers.SpecForRemoval(d.step.ID)
			if err == nil {
				why, err = leaver.WouldLeave(ctx, spec, func(q string) bool { return gone[q] })
			}
			if err != nil {
				continue // the apply finds out
			}
		}
		if why != "" {
			d.step.Planned, d.step.Note = event.ActionReleased, fmt.Sprintf("left in place: %s", why)
			delete(gone, d.path)
		}
	}
}

// foreseeMissingParents gives a plan's creation of a file, directory or
// archive the error its apply would meet when its parent directory
// neither exists nor is declared: the drivers create no parents. A plan
// that said "created" there would be the plan of an apply that fails. The
// step's error is only the plan's: apply tries it again, as it does every
// step whose observation failed. A creation beneath a declared directory
// that itself cannot be created is told so too.
func (rc *Reconciler) foreseeMissingParents(steps []*Step) {
	if rc.Root == nil {
		return
	}
	type creation struct {
		step *Step
		kind drivers.Kind
		path string
	}
	var made []creation
	declared := make(map[string]*Step) // the directories a declaration lays down, by path
	for _, s := range steps {
		kind, key, ok := drivers.SplitID(s.ID)
		if !ok || s.Spec == nil {
			continue
		}
		switch kind {
		case drivers.KindDirectory, drivers.KindArchive:
			declared[key] = s
		case drivers.KindFile:
		default:
			continue
		}
		if s.Planned == event.ActionCreate && s.Err == nil {
			made = append(made, creation{s, kind, key})
		}
	}
	// Shallowest first: a declared parent is judged before what it holds.
	slices.SortStableFunc(made, func(a, b creation) int { return depth(a.path) - depth(b.path) })
	exists := make(map[string]bool)
	for _, c := range made {
		dir := path.Dir(c.path)
		if dir == "/" {
			continue
		}
		if p := declared[dir]; p != nil {
			if errors.Is(p.Err, drivers.ErrNoParent) {
				c.step.Err = fmt.Errorf("%s %s: %w: its directory %s cannot be created either", c.kind, c.path, drivers.ErrNoParent, dir)
			}
			continue
		}
		there, seen := exists[dir]
		if !seen {
			f, err := rc.Root.OpenDir(dir)
			if err == nil {
				f.Close()
			}
			// Only absence is foreseen; anything else in the way (a
			// symlink, a file) the driver refuses in its own words.
			there = !errors.Is(err, fs.ErrNotExist)
			exists[dir] = there
		}
		if !there {
			c.step.Err = drivers.NoParent(c.kind, c.path)
		}
	}
}

// depth is how many directories deep the clean absolute path p is.
func depth(p string) int { return strings.Count(p, "/") }

// pathOf is where the resource of s lies beneath the root: a file's,
// directory's or archive's key, what its driver says for others
// (drivers.Located); empty when it has no path there (a package).
func (rc *Reconciler) pathOf(s *Step) string {
	kind, key, ok := drivers.SplitID(s.ID)
	if !ok {
		return ""
	}
	switch kind {
	case drivers.KindFile, drivers.KindDirectory, drivers.KindArchive:
		return key
	}
	l, ok := rc.Drivers[kind].(drivers.Located)
	if !ok {
		return ""
	}
	spec := s.Spec
	if spec == nil {
		var err error
		if spec, err = drivers.SpecForRemoval(s.ID); err != nil {
			return ""
		}
	}
	return l.PathOf(spec)
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
// from nothing (a tenth of a 10,000-file apply's time went to copying
// stacks).
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

// apply changes the steps of one dependency level, Root.StageBatch at a
// time, so that every file staged is staged without a name and no more
// descriptors are held than that. Drivers that can stage (files) are
// staged all, synced once, committed all; the commits are made durable by
// the next batch's flush, or by one after the last. durable, if not nil,
// is handed the steps staged and committed as each flush makes them
// durable, for their outcomes to be journaled while the level goes on.
func (rc *Reconciler) apply(ctx context.Context, steps []*Step, durable func([]*Step)) {
	var unflushed []*Step // committed, the commits not yet flushed
	for len(steps) > 0 {
		n := len(steps)
		switch {
		case rc.StageBatch > 0:
			n = min(n, rc.StageBatch)
		case rc.Root != nil:
			n = min(n, rc.Root.StageBatch())
		}
		var flushed []*Step
		flushed, unflushed = rc.applyBatch(ctx, steps[:n], unflushed)
		if len(flushed) > 0 && durable != nil {
			durable(flushed)
		}
		steps = steps[n:]
	}
	if len(unflushed) == 0 {
		return
	}
	if err := rc.Root.SyncFS(); err != nil {
		failUnflushed(unflushed, err)
	} else if durable != nil {
		durable(unflushed)
	}
}

// failUnflushed fails the steps committed whose commits a flush did not
// make durable.
func failUnflushed(unflushed []*Step, err error) {
	for _, s := range unflushed {
		if s.Err == nil {
			s.fail(fmt.Errorf("renamed into place but not flushed: %w", err))
		}
	}
}

// applyBatch is apply's work on one batch of steps. unflushed are the
// earlier batches' commits, which its flush makes durable; it returns
// those it flushed and its own commits, still to flush.
func (rc *Reconciler) applyBatch(ctx context.Context, steps []*Step, unflushed []*Step) (flushed, committed []*Step) {
	var staged []*Step
	pendings := make(map[*Step]drivers.Pending)
	var mu sync.Mutex
	steps, batches := rc.batches(steps)
	for _, b := range batches {
		rc.applyTogether(ctx, b)
	}
	_ = rc.each(ctx, steps, func(ctx context.Context, s *Step) {
		if s.Err != nil { // observing it failed: try once more, plainly
			s.Err = nil
		}
		d, err := rc.driver(s.ID)
		if err != nil {
			s.fail(err)
			return
		}
		if s.Planned == event.ActionReleased {
			s.Outcome = event.ActionReleased // nothing to do but say so
			return
		}
		if s.Spec == nil {
			spec, err := drivers.SpecForRemoval(s.ID)
			if err == nil {
				err = d.Remove(ctx, spec)
			}
			if errors.Is(err, drivers.ErrLeftInPlace) {
				// No longer the host's alone: it stops owning it and
				// leaves it, rather than fail at every reconcile.
				s.Outcome, s.Note = event.ActionReleased, err.Error()
				return
			}
			if err != nil {
				s.fail(err)
				return
			}
			s.Outcome = event.ActionDelete
			return
		}
		if st, ok := d.(drivers.Stager); ok && rc.Root != nil {
			p, err := st.Stage(ctx, s.Spec)
			if err != nil {
				s.fail(err)
				return
			}
			if p == nil {
				s.Outcome = event.ActionUnchanged
				return
			}
			mu.Lock()
			staged, pendings[s] = append(staged, s), p
			mu.Unlock()
			return
		}
		a, err := d.Apply(ctx, s.Spec)
		s.applied(d, a, err)
	})
	if len(staged) == 0 {
		return nil, unflushed
	}
	if len(unflushed) == 0 && flushEach(staged, pendings) {
		return commitFlushingEach(staged, pendings), nil
	}
	// What must be on disk before a rename: the new file's bytes. One
	// flush for all of them (and the earlier batches' renames), then the
	// renames, flushed by the next batch's or apply's last.
	if err := rc.Root.SyncFS(); err != nil {
		for _, s := range staged {
			pendings[s].Abort()
			s.fail(err)
		}
		failUnflushed(unflushed, err)
		return nil, nil
	}
	for _, s := range staged {
		a, err := pendings[s].Commit()
		if err != nil {
			s.fail(err)
			continue
		}
		s.Outcome = outcome(a)
		committed = append(committed, s)
	}
	return unflushed, committed
}

// flushEachMax is how many staged changes are made durable each by
// itself (an fsync of each file before its rename and of its directory
// after) rather than by two flushes of the whole filesystem. A push
// changes a few files: SyncFS would also wait for every other write the
// machine has pending (its workload's, or, on a bed of many hosts, every
// other host's), and made a rollout to 1,000 hosts on one disk take 10 s.
// A first apply of thousands of files is still cheaper with two SyncFS.
const flushEachMax = 32

// flushEach says whether staged are few enough to make durable each by
// itself, and each can.
func flushEach(staged []*Step, pendings map[*Step]drivers.Pending) bool {
	if len(staged) > flushEachMax {
		return false
	}
	for _, s := range staged {
		if _, ok := pendings[s].(drivers.Flusher); !ok {
			return false
		}
	}
	return true
}

// commitFlushingEach makes each staged change durable, commits it, and
// makes the commit durable. A change whose bytes cannot be flushed is
// not committed.
func commitFlushingEach(staged []*Step, pendings map[*Step]drivers.Pending) (durable []*Step) {
	for _, s := range staged {
		p := pendings[s]
		f := p.(drivers.Flusher)
		if err := f.FlushStaged(); err != nil {
			p.Abort()
			s.fail(err)
			continue
		}
		a, err := p.Commit()
		if err != nil {
			s.fail(err)
			continue
		}
		if err := f.FlushCommitted(); err != nil {
			s.fail(fmt.Errorf("committed but not flushed: %w", err))
			continue
		}
		s.Outcome = outcome(a)
		durable = append(durable, s)
	}
	return durable
}

// applied records what an Apply of s by d did, with the driver's note
// and the ids the resource holds.
func (s *Step) applied(d drivers.Driver, a drivers.Action, err error) {
	if err != nil {
		s.fail(err)
		return
	}
	s.Outcome = outcome(a)
	if n, ok := d.(drivers.Noter); ok {
		s.Note = n.ApplyNote(s.Spec)
	}
	if n, ok := d.(drivers.Numbered); ok {
		for _, id := range n.Numbers(s.Spec) {
			s.IDs = append(s.IDs, event.HeldID{Kind: id.Kind, ID: id.ID, Name: id.Name, Made: id.Made})
		}
	}
}

// batches takes out of steps those a driver applies together
// (drivers.BatchApplier: units, whose manager is reloaded once for all),
// grouped by driver; the rest are applied one by one.
func (rc *Reconciler) batches(steps []*Step) (rest []*Step, batches [][]*Step) {
	byKind := map[drivers.Kind][]*Step{}
	var kinds []drivers.Kind
	for _, s := range steps {
		kind, _, _ := drivers.SplitID(s.ID)
		if _, ok := rc.Drivers[kind].(drivers.BatchApplier); !ok || s.Spec == nil || s.Planned == event.ActionReleased {
			rest = append(rest, s)
			continue
		}
		if _, seen := byKind[kind]; !seen {
			kinds = append(kinds, kind)
		}
		byKind[kind] = append(byKind[kind], s)
	}
	for _, k := range kinds {
		batches = append(batches, byKind[k])
	}
	return rest, batches
}

// applyTogether applies steps, all of one kind whose driver is a
// drivers.BatchApplier, in one call.
func (rc *Reconciler) applyTogether(ctx context.Context, steps []*Step) {
	d, err := rc.driver(steps[0].ID)
	if err != nil {
		for _, s := range steps {
			s.fail(err)
		}
		return
	}
	specs := make([]drivers.Spec, len(steps))
	for i, s := range steps {
		s.Err = nil // observing it failed: try once more, plainly
		specs[i] = s.Spec
	}
	results := d.(drivers.BatchApplier).ApplyBatch(ctx, specs)
	for i, s := range steps {
		if i >= len(results) {
			s.fail(fmt.Errorf("%s: the driver's batch said nothing of it", s.ID))
			continue
		}
		s.applied(d, results[i].Action, results[i].Err)
	}
}

func (s *Step) fail(err error) {
	s.Outcome, s.Err = event.ActionFailed, err
}

func outcome(a drivers.Action) event.Action {
	switch a {
	case drivers.Created:
		return event.ActionCreate
	case drivers.Updated:
		return event.ActionUpdate
	}
	return event.ActionUnchanged
}

// levels orders steps for applying: groups, then users (a file's owner
// may be a user declared beside it), directories shallow to deep, then
// packages, then files and archives, then execs (a migration after the
// release it runs), then units; removals in the reverse order (units,
// files and archives, packages, directories deep to shallow, users,
// groups), after everything created, since a removed directory must
// first lose the files the host owned in it.
func levels(steps []*Step) [][]*Step {
	rank := func(s *Step) int {
		kind, key, _ := drivers.SplitID(s.ID)
		depth := strings.Count(key, "/")
		const dirs = 1000 // room for any depth
		if s.Planned != event.ActionDelete && s.Planned != event.ActionReleased {
			switch kind {
			case drivers.KindGroup:
				return -2
			case drivers.KindUser:
				return -1
			case drivers.KindDirectory:
				return depth
			case drivers.KindPackage:
				return dirs + 1
			case drivers.KindFile, drivers.KindArchive:
				return dirs + 2
			case drivers.KindExec:
				return dirs + 3
			}
			return dirs + 4 // units last: their files and packages first
		}
		switch kind {
		case drivers.KindUnit, drivers.KindExec:
			return 2*dirs + 4
		case drivers.KindFile, drivers.KindArchive:
			return 2*dirs + 5
		case drivers.KindPackage:
			return 2*dirs + 6
		case drivers.KindUser:
			return 4*dirs + 1
		case drivers.KindGroup:
			return 4*dirs + 2
		}
		return 4*dirs - depth // directories, deepest first
	}
	byRank := map[int][]*Step{}
	var ranks []int
	for _, s := range steps {
		r := rank(s)
		if _, ok := byRank[r]; !ok {
			ranks = append(ranks, r)
		}
		byRank[r] = append(byRank[r], s)
	}
	slices.Sort(ranks)
	out := make([][]*Step, 0, len(ranks))
	for _, r := range ranks {
		out = append(out, byRank[r])
	}
	return out
}

// journalDrift records a drift.observed for each drifted owned resource:
// when it is about to be repaired (the record is the repair's cause), or
// when the journal does not show it drifted yet (a check without repair
// every ten minutes must not repeat itself).
func (rc *Reconciler) journalDrift(steps []*Step, req Request) error {
	var recs []event.Record
	var drifted []*Step
	for _, s := range steps {
		if !s.Drift || (!req.Repair && s.owned.drifted) {
			continue
		}
		differs := s.Observation.Differs
		if !s.Observation.Exists {
			differs = []string{"absent"}
		}
		recs = append(recs, event.New(event.DriftObserved, 0, s.ID, event.DriftObservedPayload{
			Differs: differs, Wanted: s.Digest, Seen: s.Observation.Seen,
		}))
		drifted = append(drifted, s)
	}
	if len(recs) == 0 {
		return nil
	}
	out, err := rc.Journal.Append(recs...)
	if err != nil {
		return fmt.Errorf("journal drift: %w", err)
	}
	for i, s := range drifted {
		s.DriftSeq = out[i].Seq
	}
	return nil
}

// outcomes are the steps whose outcome records are not yet journaled. The
// records are made as they are journaled, a transaction's at a time: made
// a level's at once, those of 100,000 files took an apply's peak from some
// 330 to 390 MiB.
type outcomes struct {
	steps []*Step
	// start is the reconcile.started the outcomes are of.
	start uint64
	// extra are records journaled after the steps' (what refreshes
	// delivered did), in the same transaction.
	extra []event.Record
}

func (o *outcomes) add(more outcomes) {
	o.steps = append(o.steps, more.steps...)
	o.start = more.start
}

// records are the records of the first n steps' outcomes, each followed
// by the refresh.owed records it owes, and at[i] the index of step i's
// outcome among them.
func (o *outcomes) records(n int) (recs []event.Record, at []int) {
	recs = make([]event.Record, 0, n)
	at = make([]int, n)
	for i, s := range o.steps[:n] {
		at[i] = len(recs)
		recs = append(recs, outcomeRecord(s, o.start))
		recs = append(recs, owedRecords(s, o.start)...)
	}
	return recs, at
}

// outcomesOf are one level's outcomes to journal: those not journaled
// already (journalAhead).
func outcomesOf(level []*Step, startSeq uint64) outcomes {
	o := outcomes{start: startSeq}
	for _, s := range level {
		if s.Seq != 0 || s.Outcome == "" || (s.Outcome == event.ActionUnchanged && !needsRecord(s)) {
			continue
		}
		o.steps = append(o.steps, s)
	}
	return o
}

// outcomeRecord is s's resource.applied, or its resource.skipped. A
// repair's cause is the drift it repairs; every other outcome's is the
// reconcile.
func outcomeRecord(s *Step, startSeq uint64) event.Record {
	if s.Outcome == Skipped {
		return event.New(event.ResourceSkipped, startSeq, s.ID, event.ResourceSkippedPayload{Requirement: s.SkippedFor, Reason: s.Note})
	}
	cause := startSeq
	if s.DriftSeq != 0 {
		cause = s.DriftSeq
	}
	p := event.ResourceAppliedPayload{Action: s.Outcome, IDs: s.IDs}
	if s.Spec != nil {
		p.SpecDigest = s.Digest
	}
	if s.Err != nil {
		p.Error = s.Err.Error()
	}
	if s.Outcome != event.ActionUnchanged {
		// Why a resource was released, what an exec's run printed, what
		// a unit's apply could not do here.
		p.Note = s.Note
	}
	return event.New(event.ResourceApplied, cause, s.ID, p)
}

// DefaultOutcomesPerAppend bounds the outcomes one transaction appends. bbolt
// holds every page a transaction touches in memory until it commits, with
// the projection's keys each outcome rewrites: 100,000 outcomes in one
// transaction held hundreds of megabytes. In transactions of this many,
// a level of 100,000 files costs twenty flushes rather than one, most of
// them while the level goes on (ahead), and the memory of one.
//
// Measured (docs/performance.md): at 10,000 files, transactions of 5,000
// rather than 10,000 took an apply's peak from 44 to 46 MiB to 40 to 42
// MiB, and a later check's by under 1 MiB the other way; at 19,000 files,
// with the journal's pages given back after each (journal.releaseAfter),
// from 55 to 58 MiB to 53 to 54 MiB; at 100,000 files the peak is some 30
// MiB higher (310 to 330 MiB) in the same time. Transactions of 2,000 had
// made every later check of a 10,000-file journal 2 to 3 MiB larger
// (likely the projection's pages, rewritten five times, scattered through
// the file) and a 100,000-file apply slower.
const DefaultOutcomesPerAppend = 5_000

// journalOutcomes appends held, with more records after them, and empties
// it: in one transaction, or, past OutcomesPerAppend, in transactions of
// that many, more with the last. A crash between two leaves the reconcile
// in progress, as a crash between two levels does, and the next start
// finishes it.
func (rc *Reconciler) journalOutcomes(held *outcomes, more ...event.Record) ([]event.Record, error) {
	perAppend := rc.outcomesPerAppend()
	for len(held.steps) > perAppend {
		recs, at := held.records(perAppend)
		out, err := rc.Journal.Append(recs...)
		if err != nil {
			return nil, fmt.Errorf("journal outcomes: %w", err)
		}
		for i, s := range held.steps[:perAppend] {
			s.Seq = out[at[i]].Seq
		}
		held.steps = held.steps[perAppend:]
	}
	if len(held.steps)+len(held.extra)+len(more) == 0 {
		return nil, nil
	}
	recs, at := held.records(len(held.steps))
	recs = append(recs, held.extra...)
	n := len(recs)
	out, err := rc.Journal.Append(append(recs, more...)...)
	if err != nil {
		return nil, fmt.Errorf("journal outcomes: %w", err)
	}
	for i, s := range held.steps {
		s.Seq = out[at[i]].Seq
	}
	*held = outcomes{}
	return out[n:], nil
}

// ahead journals the outcomes of a level's files made durable while the
// level goes on staging and committing the rest: OutcomesPerAppend at a
// time, once more than that are waiting, one transaction at a time on a
// goroutine of its own. Journaled at the level's end instead, the outcomes
// of 100,000 files were some 2 s of an apply in which the disk and a core
// were idle. What is left when the level ends, at most OutcomesPerAppend,
// is journaled as before, the last level's with the reconcile's end: a
// level of up to OutcomesPerAppend files is journaled as it always was.
type ahead struct {
	rc      *Reconciler
	start   uint64  // the reconcile.started the outcomes are of
	waiting []*Step // durable, not yet handed to the goroutine
	batches chan []*Step
	done    chan struct{}
	err     error // the first append that failed; read after done
}

// journalAhead starts an ahead for the outcomes of the reconcile started
// at start.
func (rc *Reconciler) journalAhead(start uint64) *ahead {
	a := &ahead{rc: rc, start: start, batches: make(chan []*Step, 1), done: make(chan struct{})}
	go a.run()
	return a
}

// add takes steps whose outcomes are final and durable.
func (a *ahead) add(steps []*Step) {
	a.waiting = append(a.waiting, steps...)
	n := a.rc.outcomesPerAppend()
	for len(a.waiting) > n {
		a.batches <- a.waiting[:n:n]
		a.waiting = slices.Clone(a.waiting[n:])
	}
}

func (a *ahead) run() {
	defer close(a.done)
	for steps := range a.batches {
		if a.err != nil {
			continue // the level ends early: these are journaled, or not, with it
		}
		o := outcomes{steps: steps, start: a.start}
		recs, at := o.records(len(steps))
		out, err := a.rc.Journal.Append(recs...)
		if err != nil {
			a.err = fmt.Errorf("journal outcomes: %w", err)
			continue
		}
		for i, s := range steps {
			s.Seq = out[at[i]].Seq
		}
	}
}

// wait waits for what was handed to the goroutine to be journaled, and
// returns the first error. The rest is the level's to journal.
func (a *ahead) wait() error {
	close(a.batches)
	<-a.done
	return a.err
}

// complete journals the reconcile's end, after the outcomes held (nil for
// none), in one transaction.
func (rc *Reconciler) complete(res *Result, req Request, started time.Time, cause uint64, quiet bool, held *outcomes) error {
	for _, s := range res.Steps {
		switch {
		case s.Outcome == Skipped:
			res.Skipped++
		case s.Outcome == event.ActionFailed:
			res.Failed++
		case s.Outcome == event.ActionUnchanged || (s.Outcome == "" && s.Planned == event.ActionUnchanged):
			res.Unchanged++
		case s.Outcome != "":
			res.Changed++
		}
	}
	for _, f := range res.Refreshes {
		switch {
		case f.Err != nil:
			res.RefreshFailed++
		case f.delivered:
			res.Refreshed++
		}
	}
	result := event.ResultConverged
	if res.Failures() > 0 || slices.ContainsFunc(res.Steps, func(s *Step) bool { return s.Drift && !req.Repair }) {
		result = event.ResultFailed
	}
	end := event.New(event.ReconcileCompleted, cause, "", event.ReconcileCompletedPayload{
		Trigger: req.Trigger, Revision: req.Revision, Result: result, Started: started,
		Changed: res.Changed, Unchanged: res.Unchanged, Failed: res.Failed, Quiet: quiet,
		Skipped: res.Skipped, Refreshed: res.Refreshed, RefreshFailed: res.RefreshFailed,
	})
	if held == nil {
		held = &outcomes{}
	}
	hadOutcomes := len(held.steps)+len(held.extra) > 0
	recs, err := rc.journalOutcomes(held, end)
	switch {
	case err != nil && hadOutcomes:
		return rc.endEarly(res, req, started, err)
	case err != nil:
		return fmt.Errorf("journal reconcile completion: %w", err)
	}
	res.Completed = recs[0].Seq
	return nil
}
