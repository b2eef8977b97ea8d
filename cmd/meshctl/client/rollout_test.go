package client

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// A step saves the rollout's record when something in it changed or the
// lease is half spent, not at every tick: the record holds every node's
// step, 2 MB at 10,000 nodes.
func TestRolloutStepSavesOnlyWhatChanged(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	c := b.client(now)
	c.Now = func() time.Time { return now }
	kv, err := c.store.KV(ctx, linkproto.RolloutsBucket)
	if err != nil {
		t.Fatal(err)
	}
	r := &rollout.Rollout{ID: "r-1", Mesh: c.Mesh, Kind: rollout.KindProfiles, State: rollout.Running,
		MaxInFlight: 1, WaitHealthy: linkproto.Duration(time.Hour),
		Nodes: []rollout.Node{{Node: "web-1", Step: rollout.StepPushed, Revision: 3, Pushed: now}}}
	if r.BucketRevision, err = kv.Create(ctx, store.Key(c.Mesh, r.ID), mustJSON(r)); err != nil {
		t.Fatal(err)
	}
	d := &driver{c: c, holder: "serve-a", log: b.log, heartbeats: map[string]*linkproto.Heartbeat{}}
	stored := func() *rollout.Rollout {
		t.Helper()
		got, err := c.GetRollout(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	step := func(what string) {
		t.Helper()
		if err := d.step(ctx, r); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	step("taking the lease")
	if got := stored(); got.Holder != "serve-a" || got.BucketRevision != r.BucketRevision {
		t.Fatalf("after the first step: holder %q at revision %d, want serve-a at %d", got.Holder, got.BucketRevision, r.BucketRevision)
	}
	leased := r.BucketRevision

	now = now.Add(time.Second)
	step("nothing new")
	if got := stored(); got.BucketRevision != leased {
		t.Errorf("a step with nothing new saved the record: revision %d, want %d", got.BucketRevision, leased)
	}

	now = now.Add(rolloutLease/2 + time.Second)
	step("the lease half spent")
	got := stored()
	if got.BucketRevision == leased || !got.LeaseUntil.Equal(now.Add(rolloutLease)) {
		t.Errorf("a step with the lease half spent: revision %d (was %d), lease until %v; want it renewed to %v", got.BucketRevision, leased, got.LeaseUntil, now.Add(rolloutLease))
	}
	renewed := got.BucketRevision

	d.heartbeats["web-1"] = &linkproto.Heartbeat{Node: "web-1", Applied: 3, LastGood: 3, Sent: now, Interval: linkproto.Duration(time.Minute)}
	now = now.Add(time.Second)
	step("the node converged")
	got = stored()
	if got.BucketRevision == renewed || got.Nodes[0].Step != rollout.StepConverged {
		t.Errorf("after the node converged: revision %d (was %d), step %s; want a save with it converged", got.BucketRevision, renewed, got.Nodes[0].Step)
	}
}
