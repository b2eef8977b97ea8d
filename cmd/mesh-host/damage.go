package main

import (
	"errors"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// Every command that finds the journal damaged (a record that fails its
// checksum, a projection value that fails its own, a file cut short or
// emptied) exits exitDamaged, distinct from exitFailed so that a script, or
// the launcher's log, can tell "the journal cannot be trusted" from
// "something failed".

// isDamage reports whether err, anywhere in its chain, is damage found in
// the journal's file, its records or its stored projection.
func isDamage(err error) bool {
	return errors.Is(err, journal.ErrCorrupt) || errors.Is(err, event.ErrCorrupt) || errors.Is(err, projector.ErrCorrupt)
}

// damageStop is the one way a command stops on damage: exit exitDamaged
// with err, which is the journal's recovery message (see asDamage).
func damageStop(err error) error { return &exitError{code: exitDamaged, err: err} }

// asDamage returns err as damage to j's file when it is damage: with the
// recovery message (a projector.ErrCorrupt does not carry one), and noted
// by j so that nothing is appended to it after. Any other err is returned
// as it is.
func asDamage(j *journal.Journal, err error) error {
	if err == nil || !isDamage(err) {
		return err
	}
	return j.Damaged(err)
}

// projectionDamage is damage the projector found while folding, as the
// journal recognises damage from its fold (journal.Options.Fold): Append
// refuses it, and every append after it.
type projectionDamage struct{ err error }

func (d projectionDamage) Error() string        { return d.err.Error() }
func (d projectionDamage) Unwrap() error        { return d.err }
func (d projectionDamage) Is(target error) bool { return target == journal.ErrCorrupt }

// storedFold is projector.Stored's fold with its damage made the journal's.
func storedFold(st journal.Store, recs []event.Record) error {
	err := new(projector.Stored).Fold(st, recs)
	if errors.Is(err, projector.ErrCorrupt) {
		return projectionDamage{err}
	}
	return err
}

// verifyJournal reads all of j that a command may report from or append
// after: every record (checksums, no gaps), the stored projection and the
// compaction snapshot (checksums, decoding). It returns the first damage
// found, as asDamage does.
func verifyJournal(j *journal.Journal) error {
	if err := j.Check(); err != nil {
		return asDamage(j, err)
	}
	if _, _, err := storedState(j); err != nil {
		return err
	}
	_, _, err := snapshotState(j)
	return err
}
