// Package fleetview prints what the operator's client reads of a fleet
// for a person, or as JSON lines for a program: the nodes table and its
// summary line, a fleet's plans grouped by plan, the diff of what
// profiles render against what is stored, and a node's journal and the
// cause chain behind a resource, read from the events stream. It is
// `meshctl`'s side of what statusview and journalview are for both
// binaries.
//
// It reads nothing itself (it is handed what the client read, or a
// reader of a node's records) and decides nothing: package main chooses
// what to print.
package fleetview

import "errors"

// Errors returned by this package.
var (
	// ErrNotPlanned is returned by PrintPlans when a node did not answer
	// with a plan: offline, refused, busy, or failed.
	ErrNotPlanned = errors.New("not every node planned")
	// ErrFailureForeseen is returned by PrintPlans when a node's plan
	// foresees a failure: applying its declaration would fail there.
	ErrFailureForeseen = errors.New("a plan foresees failures")
)
