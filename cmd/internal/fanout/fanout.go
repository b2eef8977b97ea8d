// Package fanout runs one function over many items with a bound on how
// many run at once: the control plane's plans, labels, renders and
// pushes, each a round trip to the broker, done for thousands of nodes.
//
// It is not a worker pool that outlives a call, and it collects nothing:
// fn writes its result where the caller keeps one per item.
package fanout

import (
	"context"
	"sync"
)

// Each calls fn(i, items[i]) for every item, at most n at once, in the
// order of items, and returns once every call has returned. Once ctx ends
// no further item is started; started says how many were, so that the
// caller can tell items[started:] were not.
func Each[T any](ctx context.Context, n int, items []T, fn func(i int, item T)) (started int) {
	n = max(n, 1)
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, item := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return i
		}
		if ctx.Err() != nil {
			<-sem
			return i
		}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(i, item)
		})
	}
	return len(items)
}
