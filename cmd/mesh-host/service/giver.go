package service

import (
	"runtime/debug"
	"sync"
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
// any reconcile's fsyncs.
type giver struct {
	j     *journal.Journal
	later *time.Timer
}

// settle is how long after a reconcile what it set off (its heartbeat's
// Report, its records sent upward) is over and garbage too.
const settle = 5 * time.Second

func newGiver(j *journal.Journal) *giver {
	g := &giver{j: j}
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
	heapReturns.request()
}

func (g *giver) stop() { g.later.Stop() }

// heapReturns returns the process's freed heap, and the pages of its
// code that the reconcile ran (releaseProgramText). The heap is the
// process's, not a service's: where one process runs many services (the
// beds' fleet runner runs thousands), each service's forced collection
// is of every service's heap and goroutine stacks, and a rollout to them
// all would collect the whole process once a node. Returns are
// coalesced, and paced by what they cost: the next starts at least a
// second after the last started, and at least costFactor times as long as
// the last took after it ended, so returning memory takes at most about
// 1 % of a core. A request meanwhile is served by the next. A host's own
// process (a millisecond a return, reconciles seconds apart) returns at
// once.
var heapReturns = &returner{every: time.Second, free: func() {
	debug.FreeOSMemory()
	_ = releaseProgramText() // without /proc, the pages stay until reclaimed
}}

// costFactor is how many times a return's own duration the next one
// waits after it.
const costFactor = 100

type returner struct {
	every time.Duration
	free  func()

	mu      sync.Mutex
	next    time.Time   // when the next return may start
	due     *time.Timer // the return waiting for its turn, if any
	running bool        // a return is under way
	again   bool        // asked for while one was under way
}

// request has the heap returned as soon as its turn comes.
func (r *returner) request() {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.running:
		// Its turn is known only when the one under way ends.
		r.again = true
	case r.due == nil:
		r.due = time.AfterFunc(max(0, time.Until(r.next)), r.run)
	}
	// Else the return waiting serves this request too.
}

func (r *returner) run() {
	r.mu.Lock()
	r.due, r.running = nil, true
	r.mu.Unlock()
	start := time.Now()
	r.free()
	took := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running = false
	r.next = start.Add(r.every)
	if paced := time.Now().Add(costFactor * took); paced.After(r.next) {
		r.next = paced
	}
	if r.again {
		r.again = false
		r.due = time.AfterFunc(time.Until(r.next), r.run)
	}
}
