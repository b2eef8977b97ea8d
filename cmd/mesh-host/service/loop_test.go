package service

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal/event"
)

type loopProbe struct {
	started  chan event.Trigger
	release  chan struct{}
	canceled chan bool // whether the reconcile's ctx had ended when it returned
	done     chan struct{}
}

func newLoopProbe() *loopProbe {
	return &loopProbe{started: make(chan event.Trigger, 10), release: make(chan struct{}), canceled: make(chan bool, 10), done: make(chan struct{}, 10)}
}

// reconcile blocks until released or its context ends.
func (p *loopProbe) reconcile(ctx context.Context, tr event.Trigger) (*agent.Result, error) {
	p.started <- tr
	select {
	case <-p.release:
		p.canceled <- ctx.Err() != nil
		return &agent.Result{}, nil
	case <-ctx.Done():
		p.canceled <- true
		return nil, ctx.Err()
	}
}

func runLoop(t *testing.T, c *Config, ctx context.Context, wake chan event.Trigger, p *loopProbe) chan error {
	t.Helper()
	out := make(chan error, 1)
	go func() {
		out <- c.reconcileLoop(ctx, loopHooks{wake: wake, reconcile: p.reconcile, done: func() { p.done <- struct{}{} }}, slog.New(slog.DiscardHandler))
	}()
	return out
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	panic("unreachable")
}

// TestStopFinishesTheApplyInFlight: the service told to stop lets the
// reconcile in flight finish (its context is not cancelled), then returns.
func TestStopFinishesTheApplyInFlight(t *testing.T) {
	c := &Config{DriftInterval: time.Hour, StopTimeout: time.Hour}
	ctx, stop := context.WithCancel(context.Background())
	p := newLoopProbe()
	out := runLoop(t, c, ctx, make(chan event.Trigger, 1), p)
	if tr := recv(t, p.started, "the start reconcile"); tr != event.TriggerStart {
		t.Errorf("got trigger %s, want start", tr)
	}
	stop()
	select {
	case err := <-out:
		t.Fatalf("the loop returned (%v) with a reconcile in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(p.release)
	if recv(t, p.canceled, "the reconcile to return") {
		t.Error("the reconcile's context was cancelled by the stop")
	}
	recv(t, p.done, "the completed reconcile reported")
	if err := recv(t, out, "the loop to return"); err != nil {
		t.Errorf("got %v", err)
	}
}

// TestStopTimeoutCancelsTheApply: past --stop-timeout, the apply is
// cancelled.
func TestStopTimeoutCancelsTheApply(t *testing.T) {
	c := &Config{DriftInterval: time.Hour, StopTimeout: 50 * time.Millisecond}
	ctx, stop := context.WithCancel(context.Background())
	p := newLoopProbe()
	out := runLoop(t, c, ctx, make(chan event.Trigger, 1), p)
	recv(t, p.started, "the start reconcile")
	stop()
	if !recv(t, p.canceled, "the reconcile cancelled") {
		t.Error("the reconcile returned without its context cancelled")
	}
	if err := recv(t, out, "the loop to return"); err != nil {
		t.Errorf("got %v", err)
	}
}

// TestLoopTriggers: pushed and timer reconciles, each reported done.
func TestLoopTriggers(t *testing.T) {
	c := &Config{DriftInterval: 200 * time.Millisecond, StopTimeout: 10 * time.Millisecond}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := newLoopProbe()
	wake := make(chan event.Trigger, 1)
	out := runLoop(t, c, ctx, wake, p)
	for _, want := range []event.Trigger{event.TriggerStart, event.TriggerPushed, event.TriggerTimer} {
		if want == event.TriggerPushed {
			wake <- event.TriggerPushed
		}
		if got := recv(t, p.started, string(want)); got != want {
			t.Fatalf("got trigger %s, want %s", got, want)
		}
		p.release <- struct{}{}
		recv(t, p.canceled, "the reconcile to return")
		recv(t, p.done, "done")
	}
	stop()
	if err := recv(t, out, "the loop to return"); err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("got %v", err)
	}
}

// TestFactsJournaledWhenTheyChange: the machine's facts are journaled at
// the first look, not again while they stay, and again when they change.
func TestFactsJournaledWhenTheyChange(t *testing.T) {
	j, err := hostjournal.Open(filepath.Join(t.TempDir(), "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	f := event.HostFactsPayload{Hostname: "web-1", Kernel: "6.1", Cores: 2}
	gather := func() event.HostFactsPayload { return f }
	for i, want := range []bool{true, false, false} {
		if changed, err := recordFacts(j, gather); err != nil || changed != want {
			t.Fatalf("look %d: changed %t, %v; want %t", i, changed, err, want)
		}
	}
	f.Kernel = "6.12" // an upgrade and a reboot, under the mesh
	if changed, err := recordFacts(j, gather); err != nil || !changed {
		t.Fatalf("after the kernel changed: %t, %v", changed, err)
	}
	s, _, err := hostjournal.StoredState(j)
	if err != nil || s.Facts == nil || s.Facts.Kernel != "6.12" {
		t.Errorf("the projection's facts: %+v, %v", s.Facts, err)
	}
}
