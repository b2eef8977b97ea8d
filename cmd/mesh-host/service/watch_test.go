package service

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
)

// TestWatchWakesTheReconcileLoop: what a watch says drifted wakes the
// reconcile loop with the watch trigger; a watch that fails does not end
// the service, which goes on until it is told to stop.
func TestWatchWakesTheReconcileLoop(t *testing.T) {
	wake := make(chan event.Trigger, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchLoop(ctx, func(ctx context.Context, drifted func()) error {
			calls <- struct{}{}
			drifted()
			drifted() // coalesced: one slot
			return errors.New("no service manager runs in /")
		}, wake, slog.New(slog.DiscardHandler))
	}()
	select {
	case tr := <-wake:
		if tr != event.TriggerWatch {
			t.Errorf("got trigger %s, want watch", tr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a drift the watch told of did not wake the reconcile loop")
	}
	select {
	case <-done:
		t.Fatal("a failed watch ended the loop")
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch loop did not end with its context")
	}
	if len(calls) != 1 {
		t.Errorf("watch asked %d times within its retry delay, want 1", len(calls))
	}
}
