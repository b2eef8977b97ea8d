package main

import (
	"errors"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/projector"
)

// heldJournal is the service's open journal, lent to the commands it runs on
// behalf of clients of its socket.
type heldJournal struct {
	j *journal.Journal
	// stateDir is the service's state directory: a command the service
	// runs for a client reads its files (the sealing key, link.json) from
	// there, not from the client's flags, which are not forwarded.
	stateDir string
	// reconciling lets one reconcile run at a time: the service's own
	// (start, pushed, reconnect, timer) and those clients ask for (apply,
	// check).
	reconciling sync.Mutex
	// admitting makes checking a declaration against the accepted one and
	// journaling it one step. It is never held across an apply, so a push
	// is answered while one runs. Taken after reconciling, when both are.
	admitting sync.Mutex
	// reconciled, when the service has a link, is told of every completed
	// reconcile, its own and those clients ask for: a heartbeat is due.
	reconciled func()
	// look wakes the service's reconcile loop to look for a newer version
	// between reconciles: after a reconcile a client asked for (apply,
	// check), or an arrival marker written. One slot: a wake pending is
	// enough.
	look chan struct{}
	// standingAside is set, under reconciling, once the service decided to
	// stand aside: no client reconcile starts after it.
	standingAside bool
}

// stateDir is the state directory of the host a command runs for: the
// service's own when the service runs it.
func (e *env) stateDir() string {
	if e.held != nil && e.held.stateDir != "" {
		return e.held.stateDir
	}
	return e.cli.StateDir
}

// afterReconcile tells the link, if any, that a reconcile completed.
func (h *heldJournal) afterReconcile() {
	if h.reconciled != nil {
		h.reconciled()
	}
}

// afterClientReconcile is afterReconcile for a reconcile a client asked
// for; it also wakes the reconcile loop.
func (h *heldJournal) afterClientReconcile() {
	h.afterReconcile()
	select {
	case h.look <- struct{}{}:
	default:
	}
}

// cliLockWait is how long a command waits for the journal's lock when no
// service answers: long enough to outlast a short `apply`, short enough that
// a person is told promptly that something else holds it.
const cliLockWait = 3 * time.Second

// openJournal opens the journal for writing, with the projection folded in
// every append, waiting up to cliLockWait for another process to let go.
func openJournal(path string) (*journal.Journal, error) {
	return journal.Open(path, journal.Options{Fold: storedFold, Timeout: cliLockWait})
}

// openJournalReadOnly opens the journal to read it, beside other readers.
func openJournalReadOnly(path string) (*journal.Journal, error) {
	return journal.Open(path, journal.Options{ReadOnly: true, Timeout: cliLockWait})
}

// silent is an exit code with nothing more to say: the service already
// printed what the command had to say.
func silent(code int) error {
	if code == exitOK {
		return nil
	}
	return &exitError{code: code, err: errors.New("")}
}

// withJournal runs fn against the journal. Inside the service that is the
// service's own, which it read whole at start and scrubs. Otherwise, unless
// --journal names a file, the command line is forwarded to a running
// service, which runs this same command; when none answers, the file is
// opened read-only here and read whole (verifyJournal) before fn runs.
func (e *env) withJournal(fn func(j *journal.Journal) error) error {
	if e.held != nil {
		return fn(e.held.j)
	}
	if e.cli.Journal == "" {
		code, err := localsock.Call(e.ctx, e.cli.socketPath(), e.args, e.stdout, e.stderr)
		if err == nil {
			return silent(code)
		}
		if !errors.Is(err, localsock.ErrNoService) {
			return failed("ask the running service: %v", err)
		}
	}
	j, err := openJournalReadOnly(e.cli.journalPath())
	if err != nil {
		return failed("%w", err)
	}
	defer j.Close()
	if err := verifyJournal(j); err != nil {
		return failed("%w", err)
	}
	return fn(j)
}

// storedState loads the journal's stored projection and the head it folds
// through. Damage is returned as asDamage does.
func storedState(j *journal.Journal) (projector.State, uint64, error) {
	return loadState(j, j.Projection)
}

// snapshotState loads the journal's compaction snapshot and the sequence
// it folds through.
func snapshotState(j *journal.Journal) (projector.State, uint64, error) {
	return loadState(j, j.Snapshot)
}

// loadState loads the State a view of j holds (the projection, or the
// compaction snapshot) and the sequence it folds through.
func loadState(j *journal.Journal, view func(func(journal.View, uint64) error) error) (projector.State, uint64, error) {
	var s projector.State
	var seq uint64
	err := view(func(v journal.View, at uint64) error {
		var err error
		s, err = projector.Load(v)
		seq = at
		return err
	})
	return s, seq, asDamage(j, err)
}
