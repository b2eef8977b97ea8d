package tuning

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Budget for a command that applies or checks n resources: floor, what any
// such command holds (its program's data, the journal's projection, a
// transaction), and perResource for each resource (its spec, digest, step,
// outcome record and the journal's entries for it, until its transaction
// commits). The budget is some 30 % above an apply's peak live heap
// (runtime/metrics /gc/heap/live:bytes), so that the collector's extra
// work stays small; docs/architecture.md has the measurements.
const (
	floor       = 24 << 20
	perResource = 900
)

// BudgetFor is the memory budget for a command that applies or checks n
// resources.
func BudgetFor(n int) int64 {
	return floor + int64(n)*perResource
}

// liftAt is the share of the limit, in hundredths, past which the live
// heap lifts it.
const liftAt = 95

var (
	mu      sync.Mutex
	limit   int64 // 0: none set here
	lifted  bool
	watched bool
)

// SetMemoryBudget keeps a command's memory near what its work holds rather
// than at twice it.
//
// Go's collector lets the heap grow to twice what was live after the last
// collection (GOGC=100) before it collects again, and keeps the freed pages
// a while: for an apply of many files, memory taken from the workload of
// the machine for nothing. A soft memory limit (runtime/debug.SetMemoryLimit)
// makes the collector run more often as the heap nears it, and return
// freed pages to the system at once.
//
// A limit below what is live would make the collector run nearly all the
// time (the runtime caps it at half the CPU): a declaration whose files
// hold more than BudgetFor expects would take twice as long. So the limit
// is lifted for the rest of the process once a collection finds the live
// heap past liftAt of it; from there the collector keeps its usual pace.
//
// SetMemoryBudget makes bytes the process's soft memory limit, unless the operator set
// one (GOMEMLIMIT) or an earlier limit was lifted. It only ever raises a
// limit set here: a command that reads a larger declaration gets the
// larger budget.
func SetMemoryBudget(bytes int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if lifted || bytes <= limit {
		return
	}
	limit = bytes
	debug.SetMemoryLimit(bytes)
	if !watched {
		watched = true
		watch()
	}
}

// watch runs afterCollection after the next collection, and again after
// each one while it asks to: a cleanup runs once the collector has found
// its object unreachable.
func watch() {
	runtime.AddCleanup(new([64]byte), func(struct{}) {
		if afterCollection() {
			watch()
		}
	}, struct{}{})
}

var live = []metrics.Sample{{Name: "/gc/heap/live:bytes"}}

// afterCollection lifts the limit once the live heap is past liftAt of it,
// and says whether to keep watching.
func afterCollection() bool {
	mu.Lock()
	defer mu.Unlock()
	metrics.Read(live)
	switch {
	case lifted || limit == 0 || live[0].Value.Kind() != metrics.KindUint64:
	case live[0].Value.Uint64() > uint64(limit)/100*liftAt:
		lifted = true
		debug.SetMemoryLimit(math.MaxInt64)
	default:
		return true
	}
	watched = false
	return false
}
