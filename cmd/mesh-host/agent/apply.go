package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
)

// This file is applying one level of steps: in batches, each staged,
// flushed and committed together where its driver can stage, or applied
// together where its driver takes a batch.

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
	steps, batches := rc.batches(steps)
	for _, b := range batches {
		rc.applyTogether(ctx, b)
	}
	staged := rc.applyEach(ctx, steps)
	if len(staged) == 0 {
		return nil, unflushed
	}
	if len(unflushed) == 0 && flushEach(staged) {
		return commitFlushingEach(staged), nil
	}
	return rc.commitFlushingAll(staged, unflushed)
}

// staged is a step whose change is staged, to be committed.
type staged struct {
	step    *Step
	pending drivers.Pending
}

// applyEach applies steps one by one, Parallel at a time, and returns
// those it staged.
func (rc *Reconciler) applyEach(ctx context.Context, steps []*Step) []staged {
	var mu sync.Mutex
	var out []staged
	_ = rc.each(ctx, steps, func(ctx context.Context, s *Step) {
		if p := rc.applyOne(ctx, s); p != nil {
			mu.Lock()
			out = append(out, staged{s, p})
			mu.Unlock()
		}
	})
	return out
}

// applyOne removes, releases or applies s. A change its driver can stage
// (drivers.Stager) is staged and returned, to commit with the batch's.
func (rc *Reconciler) applyOne(ctx context.Context, s *Step) drivers.Pending {
	s.Err = nil // observing it failed: try once more, plainly
	d, err := rc.driver(s.ID)
	if err != nil {
		s.fail(err)
		return nil
	}
	switch st, stages := d.(drivers.Stager); {
	case s.Planned == event.ActionReleased:
		s.Outcome = event.ActionReleased // nothing to do but say so
	case s.Spec == nil:
		remove(ctx, d, s)
	case stages && rc.Root != nil:
		return stage(ctx, st, s)
	default:
		a, err := d.Apply(ctx, s.Spec)
		s.applied(d, a, err)
	}
	return nil
}

// remove removes the resource of s, which is no longer declared.
func remove(ctx context.Context, d drivers.Driver, s *Step) {
	spec, err := drivers.SpecForRemoval(s.ID)
	if err == nil {
		err = d.Remove(ctx, spec)
	}
	switch {
	case errors.Is(err, drivers.ErrLeftInPlace):
		// No longer the host's alone: it stops owning it and leaves it,
		// rather than fail at every reconcile.
		s.Outcome, s.Note = event.ActionReleased, err.Error()
	case err != nil:
		s.fail(err)
	default:
		s.Outcome = event.ActionDelete
	}
}

// stage stages the change of s; nil when there is none to make.
func stage(ctx context.Context, st drivers.Stager, s *Step) drivers.Pending {
	p, err := st.Stage(ctx, s.Spec)
	switch {
	case err != nil:
		s.fail(err)
		return nil
	case p == nil:
		s.Outcome = event.ActionUnchanged
	}
	return p
}

// commitFlushingAll flushes the filesystem once for what must be on disk
// before a rename (the staged files' bytes, and the earlier batches'
// renames), then commits every staged change. It returns the earlier
// commits, now durable, and its own, which the next batch's flush or
// apply's last makes durable.
func (rc *Reconciler) commitFlushingAll(staged []staged, unflushed []*Step) (flushed, committed []*Step) {
	if err := rc.Root.SyncFS(); err != nil {
		for _, st := range staged {
			st.pending.Abort()
			st.step.fail(err)
		}
		failUnflushed(unflushed, err)
		return nil, nil
	}
	for _, st := range staged {
		a, err := st.pending.Commit()
		if err != nil {
			st.step.fail(err)
			continue
		}
		st.step.Outcome = outcome(a)
		committed = append(committed, st.step)
	}
	return unflushed, committed
}

// flushEachMax is how many staged changes are made durable each by
// itself (an fsync of each file before its rename and of its directory
// after) rather than by two flushes of the whole filesystem. A push
// changes a few files: SyncFS would also wait for every other write the
// machine has pending (its workload's, or, on a bed of many hosts, every
// other host's), which makes a rollout to many hosts on one disk slow.
// A first apply of thousands of files is still cheaper with two SyncFS.
const flushEachMax = 32

// flushEach says whether staged are few enough to make durable each by
// itself, and each can.
func flushEach(staged []staged) bool {
	if len(staged) > flushEachMax {
		return false
	}
	for _, st := range staged {
		if _, ok := st.pending.(drivers.Flusher); !ok {
			return false
		}
	}
	return true
}

// commitFlushingEach makes each staged change durable, commits it, and
// makes the commit durable. A change whose bytes cannot be flushed is
// not committed.
func commitFlushingEach(staged []staged) (durable []*Step) {
	for _, st := range staged {
		s, p := st.step, st.pending
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
