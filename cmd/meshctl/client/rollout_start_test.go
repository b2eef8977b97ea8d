package client

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Only one rollout is active in a mesh, even when several operators start
// one at the same moment: exactly one start wins, the others are refused.
func TestStartRolloutOneAtATime(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	c := b.client(now)
	for _, n := range []string{"web-1", "web-2"} {
		if _, err := c.LabelNew(ctx, n, "tester@bed", []string{"role=web"}); err != nil {
			t.Fatal(err)
		}
	}
	release := &drivers.ArchiveSpec{Path: "/opt/mesh-host/${version}", Source: "file:///srv/r.tar",
		Digest: "sha256:" + strings.Repeat("ab", 32), Format: "tar"}
	const starts = 6
	var (
		wg      sync.WaitGroup
		gate    = make(chan struct{})
		errs    = make([]error, starts)
		started = make([]*rollout.Rollout, starts)
	)
	for i := range starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			started[i], errs[i] = b.client(now).StartRollout(ctx, rollout.Options{Selector: "role=web", Release: release})
		}()
	}
	close(gate)
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
			t.Logf("start %d won: rollout %s", i, started[i].ID)
		case errors.Is(err, ErrRefused):
		default:
			t.Errorf("start %d: %v; want a win or ErrRefused", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent starts won; want exactly 1", won, starts)
	}
	all, err := c.Rollouts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	active := 0
	for _, r := range all {
		if r.State.Active() {
			active++
		}
	}
	if active != 1 {
		t.Errorf("%d rollouts stored active; want 1", active)
	}
}

// A rollout that stops being active frees the slot, and a slot left naming
// a rollout that is not active (a save that freed nothing) is taken over.
func TestStartRolloutAfterOneEnds(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	c := b.client(now)
	if _, err := c.LabelNew(ctx, "web-1", "tester@bed", []string{"role=web"}); err != nil {
		t.Fatal(err)
	}
	release := &drivers.ArchiveSpec{Path: "/opt/mesh-host/${version}", Source: "file:///srv/r.tar",
		Digest: "sha256:" + strings.Repeat("cd", 32), Format: "tar"}
	start := func() *rollout.Rollout {
		t.Helper()
		r, err := c.StartRollout(ctx, rollout.Options{Selector: "role=web", Release: release})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		return r
	}
	first := start()
	if _, err := c.StartRollout(ctx, rollout.Options{Selector: "role=web", Release: release}); !errors.Is(err, ErrRefused) {
		t.Fatalf("a start while %s runs: %v; want ErrRefused", first.ID, err)
	}
	if _, err := c.SetRolloutState(ctx, first.ID, rollout.Aborted, "test"); err != nil {
		t.Fatal(err)
	}
	kv, err := c.store.KV(ctx, linkproto.RolloutsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, store.ActiveKey(c.Mesh)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the slot after an abort: %v; want it freed", err)
	}
	second := start()

	// The second ends without freeing the slot, as after a crash.
	second.State = rollout.Done
	if _, err := kv.Update(ctx, store.Key(c.Mesh, second.ID), mustJSON(second), second.BucketRevision); err != nil {
		t.Fatal(err)
	}
	third := start()
	e, err := kv.Get(ctx, store.ActiveKey(c.Mesh))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(e.Value()), third.ID) {
		t.Errorf("the slot holds %s; want it naming %s", e.Value(), third.ID)
	}
}

// The active rollout, running or paused, refuses another start by name
// and state, and each state change it cannot make is refused so: the
// lifecycle an operator drives with pause, resume and abort. (No driver
// runs here: the rollout stays where its commands put it.)
func TestActiveRolloutLifecycle(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	c := b.client(time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC))
	if _, err := c.LabelNew(ctx, "web-1", "tester@bed", []string{"role=web"}); err != nil {
		t.Fatal(err)
	}
	release := &drivers.ArchiveSpec{Path: "/opt/mesh-host/${version}", Source: "file:///srv/r.tar",
		Digest: "sha256:" + strings.Repeat("cd", 32), Format: "tar"}
	start := func() error {
		_, err := c.StartRollout(ctx, rollout.Options{Selector: "role=web", Release: release})
		return err
	}
	if err := start(); err != nil {
		t.Fatal(err)
	}
	refused := func(err error, want string) {
		t.Helper()
		if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("%v; want refused, saying %q", err, want)
		}
	}
	all, err := c.Rollouts(ctx)
	if err != nil || len(all) != 1 {
		t.Fatalf("rollouts %v, %v", all, err)
	}
	id := all[0].ID
	refused(start(), "is running; resume and finish it, or abort it, first")
	refused(func() error { _, err := c.SetRolloutState(ctx, id, rollout.Running, "again"); return err }(), "is running already")
	if r, err := c.SetRolloutState(ctx, id, rollout.Paused, "paused"); err != nil || r.State != rollout.Paused {
		t.Fatalf("pause: %v, %v", r, err)
	}
	refused(func() error { _, err := c.SetRolloutState(ctx, id, rollout.Paused, "again"); return err }(), "is paused already")
	refused(start(), "is paused; resume and finish it, or abort it, first")
	if r, err := c.SetRolloutState(ctx, id, rollout.Aborted, "aborted"); err != nil || r.State != rollout.Aborted {
		t.Fatalf("abort: %v, %v", r, err)
	}
	refused(func() error { _, err := c.SetRolloutState(ctx, id, rollout.Aborted, "again"); return err }(), "is aborted already")
	if err := start(); err != nil {
		t.Errorf("a start once the active one was aborted: %v", err)
	}
}
