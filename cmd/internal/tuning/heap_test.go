package tuning

import (
	"sync/atomic"
	"testing"
	"time"
)

// Many services of one process asking at once get one return of the
// process's heap, not one each; one asking alone gets it at once.
func TestHeapReturnsAreCoalesced(t *testing.T) {
	var runs atomic.Int64
	r := &returner{every: time.Second, free: func() { runs.Add(1) }}

	start := time.Now()
	r.request()
	waitRuns(t, &runs, 1)
	if took := time.Since(start); took > r.every/2 {
		t.Errorf("a lone request waited %v for its return", took)
	}

	for range 1000 { // a fleet's worth of reconciles, within the second
		r.request()
	}
	waitRuns(t, &runs, 2)
	time.Sleep(r.every + r.every/2)
	if n := runs.Load(); n != 2 {
		t.Errorf("1,000 requests in a burst made %d returns after the first, want 1", n-1)
	}
}

func waitRuns(t *testing.T, runs *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runs.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d returns, want %d", runs.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// A return that takes long (a process of many services, each heap and
// stack scanned) holds the next off for a hundred times as long, whether
// it was asked for during that return or after it.
func TestHeapReturnsArePacedByTheirCost(t *testing.T) {
	var runs atomic.Int64
	started := make(chan struct{}, 1)
	r := &returner{every: time.Millisecond}
	r.free = func() {
		runs.Add(1)
		select {
		case started <- struct{}{}:
		default:
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.request()
	<-started
	r.request() // during the first return
	time.Sleep(100 * time.Millisecond)
	r.request() // after it
	time.Sleep(500 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("%d returns within 0.6 s of one that took 20 ms, want 1", n)
	}
	waitRuns(t, &runs, 2) // about 2 s after the first ended
	time.Sleep(500 * time.Millisecond)
	if n := runs.Load(); n != 2 {
		t.Fatalf("%d returns for three requests made before the second, want 2", n)
	}
}
