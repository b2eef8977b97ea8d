package main

import (
	"errors"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/projector"
)

// stateDir is the state directory of the host a command runs for: the
// service's own when the service runs it.
func (e *env) stateDir() string {
	if e.held != nil && e.held.StateDir != "" {
		return e.held.StateDir
	}
	return e.cli.StateDir
}

// withJournal runs fn against the journal. Inside the service that is the
// service's own, which it scrubs. Otherwise, unless --journal names a
// file, the command line is forwarded to a running service, which runs
// this same command; when none answers, the file is opened read-only here.
// fn reads only what it needs, each record and value checked as it is
// read: the file's damage mark, checked at open, stops it on damage found
// before by anything (journal.MarkSuffix), and the whole read is the
// scrub's and `journal --verify`'s.
func (e *env) withJournal(fn func(j *journal.Journal) error) error {
	if e.held != nil {
		// The service stops on damage; a question that reaches it
		// meanwhile stops as every command does.
		if err := e.held.Journal.Damage(); err != nil {
			return damageStop(err)
		}
		return fn(e.held.Journal)
	}
	if e.cli.Journal == "" {
		code, err := localsock.Call(e.ctx, e.cli.socketPath(), e.args, e.stdout, e.stderr)
		if err == nil {
			return command.Silent(code)
		}
		if !errors.Is(err, localsock.ErrNoService) {
			return failed("ask the running service: %v", err)
		}
	}
	j, err := hostjournal.OpenReadOnly(e.cli.journalPath())
	if errors.Is(err, journal.ErrNotExist) {
		return failed("%w: this host has journaled nothing yet (check --state-dir); it starts with mesh-host apply FILE, or with mesh-host enrol then mesh-host serve", err)
	}
	if err != nil {
		return failed("%w", err)
	}
	defer j.Close()
	return fn(j)
}

// verifiedState is a journal's stored state, without its owned set, and
// the head it folds through.
type verifiedState struct {
	s    projector.State
	head uint64
}

// storedState is hostjournal.StoredCore (the stored state without its
// owned set: a reconcile reads that through hostjournal.StoredOwned),
// without decoding the projection again when it is the one read at
// opening: nothing was appended since (the head has not moved). It is
// taken once.
func (e *env) storedState(j *journal.Journal) (projector.State, uint64, error) {
	if v := e.verified; v != nil {
		e.verified = nil
		if in, err := j.Info(); err == nil && in.Head == v.head {
			return v.s, v.head, nil
		}
	}
	return hostjournal.StoredCore(j)
}
