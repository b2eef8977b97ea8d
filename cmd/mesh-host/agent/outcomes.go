package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// This file is journaling what a reconcile found and did: its start with
// its plan, drift, each step's outcome (in bounded transactions, part of
// them on a goroutine while a level goes on: ahead), and its end.

// needsRecord: an unchanged resource is journaled only when the journal
// does not already say the host owns it with this spec.
func needsRecord(s *Step) bool {
	if s.Planned != event.ActionUnchanged {
		return false
	}
	o := s.owned
	return o == nil || o.digest != s.Digest || o.failed
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
// a level's at once, a large level's records would all be in memory
// together, and raise an apply's peak.
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
// the projection's keys each outcome rewrites, so one transaction of a
// large level's outcomes would hold hundreds of megabytes. In transactions
// of this many, a level of 100,000 files costs twenty flushes rather than
// one, most of them while the level goes on (ahead), and the memory of
// one. Larger transactions raise an apply's peak; smaller ones scatter
// the projection's pages, rewritten more often, through the file, which
// makes every later check larger and a large apply slower. The figures
// are in docs/performance.md.
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
// goroutine of its own. Journaled at the level's end instead, a large
// level's outcomes are time in which the disk and a core sit idle. What
// is left when the level ends, at most OutcomesPerAppend, is journaled
// with the level (the last level's with the reconcile's end): a level of
// up to OutcomesPerAppend files is journaled in one transaction.
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

// complete journals the reconcile's end, after the outcomes held (nil for
// none), in one transaction.
func (rc *Reconciler) complete(res *Result, req Request, started time.Time, cause uint64, quiet bool, held *outcomes) error {
	res.count()
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
