package service

import (
	"sync"

	"github.com/mesh-host/mesh-host/journal"
)

// Held is the service's open journal, lent to the commands it runs on
// behalf of clients of its socket.
type Held struct {
	Journal *journal.Journal
	// StateDir is the service's state directory: a command the service
	// runs for a client reads its files (the sealing key, link.json) from
	// there, not from the client's flags, which are not forwarded.
	StateDir string
	// Reconciling lets one reconcile run at a time: the service's own
	// (start, pushed, reconnect, timer) and those clients ask for (apply,
	// check).
	Reconciling sync.Mutex
	// Admitting makes checking a declaration against the accepted one and
	// journaling it one step. It is never held across an apply, so a push
	// is answered while one runs. Taken after Reconciling, when both are.
	Admitting sync.Mutex
	// reconciled, when the service has a link, is told of every completed
	// reconcile, its own and those clients ask for: a heartbeat is due.
	reconciled func()
	// look wakes the service's reconcile loop to look for a newer version
	// between reconciles: after a reconcile a client asked for (apply,
	// check), or an arrival marker written. One slot: a wake pending is
	// enough.
	look chan struct{}
	// StandingAside is set, under Reconciling, once the service decided to
	// stand aside: no client reconcile starts after it.
	StandingAside bool
}

// afterReconcile tells the link, if any, that a reconcile completed.
func (h *Held) afterReconcile() {
	if h.reconciled != nil {
		h.reconciled()
	}
}

// AfterClientReconcile is afterReconcile for a reconcile a client asked
// for; it also wakes the reconcile loop.
func (h *Held) AfterClientReconcile() {
	h.afterReconcile()
	select {
	case h.look <- struct{}{}:
	default:
	}
}
