package tuning

import (
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// reset forgets what Set did, and takes the runtime's limit off.
func reset(t *testing.T) {
	t.Helper()
	mu.Lock()
	limit, lifted = 0, false
	mu.Unlock()
	debug.SetMemoryLimit(math.MaxInt64)
	t.Cleanup(func() {
		mu.Lock()
		limit, lifted = 0, false
		mu.Unlock()
		debug.SetMemoryLimit(math.MaxInt64)
	})
}

// ours is the limit set here: 0 when none is, or it was lifted.
func ours() int64 {
	mu.Lock()
	defer mu.Unlock()
	if lifted {
		return 0
	}
	return limit
}

// current is the runtime's memory limit (a negative input only reads it).
func current() int64 { return debug.SetMemoryLimit(-1) }

func TestSetOnlyRaises(t *testing.T) {
	reset(t)
	SetMemoryBudget(64 << 20)
	if got := current(); got != 64<<20 {
		t.Fatalf("limit %d after Set(64 MiB)", got)
	}
	SetMemoryBudget(32 << 20)
	if got := current(); got != 64<<20 {
		t.Fatalf("a smaller budget lowered the limit to %d", got)
	}
	SetMemoryBudget(128 << 20)
	if got, lim := current(), ours(); got != 128<<20 || lim != 128<<20 {
		t.Fatalf("limit %d (ours %d) after Set(128 MiB)", got, lim)
	}
}

func TestOperatorsLimitStands(t *testing.T) {
	reset(t)
	t.Setenv("GOMEMLIMIT", "1GiB")
	SetMemoryBudget(64 << 20)
	if got := current(); got != math.MaxInt64 || ours() != 0 {
		t.Fatalf("with GOMEMLIMIT set, Set changed the limit to %d", got)
	}
}

// sink keeps memory live across collections.
var sink [][]byte

func TestLiftedOnceTheLiveHeapNearsIt(t *testing.T) {
	reset(t)
	sink = make([][]byte, 0, 64)
	for range 64 {
		sink = append(sink, make([]byte, 256<<10)) // 16 MiB live
	}
	defer func() { sink = nil }()
	SetMemoryBudget(16 << 20) // below what is live
	deadline := time.Now().Add(10 * time.Second)
	for ours() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the limit (%d) stayed with 16 MiB live", current())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := current(); got != math.MaxInt64 {
		t.Fatalf("ours says lifted, the runtime's is %d", got)
	}
	SetMemoryBudget(1 << 30) // once lifted, for the rest of the process
	if got := current(); got != math.MaxInt64 {
		t.Fatalf("a lifted limit was set again: %d", got)
	}
}

func TestKeptWhileTheLiveHeapIsWellBelow(t *testing.T) {
	reset(t)
	SetMemoryBudget(1 << 30)
	for range 5 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	if got := current(); got != 1<<30 || ours() != 1<<30 {
		t.Fatalf("limit %d (ours %d) after collections with little live", got, ours())
	}
	mu.Lock()
	w := watched
	mu.Unlock()
	if !w {
		t.Fatal("nothing watches the live heap")
	}
}
