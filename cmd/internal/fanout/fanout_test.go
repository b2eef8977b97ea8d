package fanout

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestEachCallsEveryItemOnceWithinTheBound(t *testing.T) {
	for _, tc := range []struct{ n, items int }{{1, 0}, {1, 5}, {3, 10}, {64, 10}, {0, 3}} {
		items := make([]int, tc.items)
		for i := range items {
			items[i] = i * 10
		}
		var (
			mu            sync.Mutex
			seen          = map[int]int{}
			inFlight, top atomic.Int32
		)
		started := Each(context.Background(), tc.n, items, func(i, item int) {
			now := inFlight.Add(1)
			for {
				old := top.Load()
				if now <= old || top.CompareAndSwap(old, now) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			mu.Lock()
			seen[i] = item
			mu.Unlock()
		})
		if started != tc.items || len(seen) != tc.items {
			t.Errorf("n=%d, %d items: started %d, saw %d; want every item", tc.n, tc.items, started, len(seen))
		}
		for i, item := range seen {
			if item != i*10 {
				t.Errorf("item %d handed %d, want %d", i, item, i*10)
			}
		}
		if got, bound := int(top.Load()), max(tc.n, 1); got > bound {
			t.Errorf("n=%d: %d ran at once", tc.n, got)
		}
	}
}

func TestEachStartsNothingOnceTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls atomic.Int32
	started := Each(ctx, 1, make([]int, 10), func(i, _ int) {
		calls.Add(1)
		if i == 2 {
			cancel()
		}
	})
	if started != 3 || calls.Load() != 3 {
		t.Errorf("started %d, called %d; want 3 each (the third cancels)", started, calls.Load())
	}
}
