package tuning

import (
	"runtime/debug"
	"sync"
	"time"
)

// HeapReturner returns the process's freed heap, and the pages of its
// code that a reconcile ran (releaseProgramText), when a service asks
// (Request) after its work is done.
//
// The heap is the process's, not a service's: where one process runs many
// services (a bed's fleet runner runs thousands), each service's forced
// collection is of every service's heap and goroutine stacks, and a
// rollout to them all would collect the whole process once a node. So a
// process has one HeapReturner, made by its main, and returns are
// coalesced and paced by what they cost: the next starts at least a second
// after the last started, and at least costFactor times as long as the
// last took after it ended, so returning memory takes at most about 1 % of
// a core. A request meanwhile is served by the next. A host's own process
// (a millisecond a return, reconciles seconds apart) returns at once.
type HeapReturner struct{ r *returner }

// NewHeapReturner makes the process's HeapReturner.
func NewHeapReturner() *HeapReturner {
	return &HeapReturner{&returner{every: time.Second, free: func() {
		debug.FreeOSMemory()
		_ = releaseProgramText() // without /proc, the pages stay until reclaimed
	}}}
}

// Request has the heap returned as soon as its turn comes. A nil
// HeapReturner returns nothing.
func (h *HeapReturner) Request() {
	if h != nil {
		h.r.request()
	}
}

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
