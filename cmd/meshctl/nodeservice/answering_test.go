package nodeservice

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Requests are answered several at once: eight handlers that each wait
// for all eight to be running finish. Answered one at a time (as a
// subscription's callback runs), the first would wait forever.
func TestRequestsAreAnsweredConcurrently(t *testing.T) {
	b := newBed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const together = 8
	var running sync.WaitGroup
	running.Add(together)
	sub, err := answer(ctx, b.nc, b.log, "tests", "test.concurrent", time.Minute, func(m *nats.Msg) {
		running.Done()
		running.Wait()
		_ = m.Respond([]byte("ok"))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	errs := make(chan error, together)
	for range together {
		go func() {
			_, err := b.nc.Request("test.concurrent", nil, 10*time.Second)
			errs <- err
		}()
	}
	for range together {
		if err := <-errs; err != nil {
			t.Fatalf("a request that needs %d answered at once: %v", together, err)
		}
	}
}

// A request that waited longer than its asker does is not answered: its
// handler never runs for it.
func TestStaleRequestsAreDropped(t *testing.T) {
	b := newBed(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	release := make(chan struct{})
	var answered atomic.Int64
	sub, err := answer(ctx, b.nc, b.log, "tests", "test.stale", 200*time.Millisecond, func(m *nats.Msg) {
		<-release // every worker busy until released
		answered.Add(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	const sent = answerWorkers + 50 // 50 wait in the queue
	for i := range sent {
		if err := b.nc.Publish("test.stale", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the queued ones are stale now
	close(release)
	time.Sleep(time.Second)
	// At most the ones the workers took at once; not the 50 queued.
	if n := answered.Load(); n > answerWorkers {
		t.Fatalf("%d requests handled; want at most the %d taken before the rest went stale", n, answerWorkers)
	}
}
