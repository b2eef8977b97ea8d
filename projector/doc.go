// Package projector folds journal records into the host's State: what it was
// told to want, what it owns and how each resource last fared, the last
// reconcile and any open one, the running and known-good versions, and the
// link to the control plane.
//
// Fold is a pure function of a State and one event.Record, so the State after
// any prefix of the journal is the same whether it is computed at once, in
// batches with a stored snapshot in between, or from a compaction snapshot
// plus the records after it. The journal keeps that snapshot up to date
// inside its write transaction through Stored; `mesh-host replay --verify`
// recomputes it from the records and reports any difference with Diff.
//
// Records of kinds this binary does not know are counted and otherwise
// ignored, and so are records of known kinds whose payload it cannot read:
// a rolled-back host must still fold a journal a newer one extended.
//
// It is not the place for deciding what to do about the State (that is the
// agent), nor for reading or writing records (that is package journal). It
// does no I/O and reads no clock: every time in a State is a record's time or
// a time a payload carries.
package projector
