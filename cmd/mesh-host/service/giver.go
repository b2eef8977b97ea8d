package service

import (
	"time"

	"github.com/mesh-host/mesh-host/journal"
)

// giver returns to the operating system what a reconcile or a client's
// command took. A reconcile of a large declaration holds it whole, with its
// observations, and reads much of the journal: Go's runtime keeps freed
// heap for minutes (and for reuse), and the journal's pages read stay
// counted as the process's memory (journal.Release). Between reconciles
// the service holds only its journal, its link and its timers. A forced
// collection of that small heap takes about a millisecond, small beside
// any reconcile's fsyncs. The heap is the process's, so what returns it
// is the process's too: the service is given it (Config.ReturnHeap).
type giver struct {
	j          *journal.Journal
	returnHeap func() // nil: the journal's pages only
	later      *time.Timer
}

// settle is how long after a reconcile what it set off (its heartbeat's
// Report, its records sent upward) is over and garbage too.
const settle = 5 * time.Second

func newGiver(j *journal.Journal, returnHeap func()) *giver {
	g := &giver{j: j, returnHeap: returnHeap}
	g.later = time.AfterFunc(settle, g.now)
	g.later.Stop()
	return g
}

// giveBack gives back now, and once more when what followed has settled.
func (g *giver) giveBack() {
	g.now()
	g.later.Reset(settle)
}

func (g *giver) now() {
	_ = g.j.Release() // closed at the service's end: nothing to give back
	if g.returnHeap != nil {
		g.returnHeap()
	}
}

func (g *giver) stop() { g.later.Stop() }
