package control

import (
	"context"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/linkproto"
)

func TestParseMaxInFlight(t *testing.T) {
	cases := []struct {
		in    string
		total int
		want  int
		bad   bool
	}{
		{"", 40, 40, false},
		{"", 0, 1, false},
		{"5", 40, 5, false},
		{"25%", 40, 10, false},
		{"1%", 40, 1, false}, // at least one node
		{"100%", 7, 7, false},
		{"0", 40, 0, true},
		{"-3", 40, 0, true},
		{"0%", 40, 0, true},
		{"101%", 40, 0, true},
		{"ten", 40, 0, true},
	}
	for _, c := range cases {
		got, err := ParseMaxInFlight(c.in, c.total)
		if c.bad != (err != nil) || got != c.want {
			t.Errorf("ParseMaxInFlight(%q, %d) = %d, %v; want %d, error %v", c.in, c.total, got, err, c.want, c.bad)
		}
	}
}

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
	r := &Rollout{ID: "r-1", Mesh: c.Mesh, Kind: RolloutProfiles, State: RolloutRunning,
		MaxInFlight: 1, WaitHealthy: linkproto.Duration(time.Hour),
		Nodes: []RolloutNode{{Node: "web-1", Step: StepPushed, Revision: 3, Pushed: now}}}
	if r.revision, err = kv.Create(ctx, nodeKey(c.Mesh, r.ID), mustJSON(r)); err != nil {
		t.Fatal(err)
	}
	d := &driver{c: c, holder: "serve-a", log: b.log, heartbeats: map[string]*linkproto.Heartbeat{}}
	stored := func() *Rollout {
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
	if got := stored(); got.Holder != "serve-a" || got.revision != r.revision {
		t.Fatalf("after the first step: holder %q at revision %d, want serve-a at %d", got.Holder, got.revision, r.revision)
	}
	leased := r.revision

	now = now.Add(time.Second)
	step("nothing new")
	if got := stored(); got.revision != leased {
		t.Errorf("a step with nothing new saved the record: revision %d, want %d", got.revision, leased)
	}

	now = now.Add(rolloutLease/2 + time.Second)
	step("the lease half spent")
	got := stored()
	if got.revision == leased || !got.LeaseUntil.Equal(now.Add(rolloutLease)) {
		t.Errorf("a step with the lease half spent: revision %d (was %d), lease until %v; want it renewed to %v", got.revision, leased, got.LeaseUntil, now.Add(rolloutLease))
	}
	renewed := got.revision

	d.heartbeats["web-1"] = &linkproto.Heartbeat{Node: "web-1", Applied: 3, LastGood: 3, Sent: now, Interval: linkproto.Duration(time.Minute)}
	now = now.Add(time.Second)
	step("the node converged")
	got = stored()
	if got.revision == renewed || got.Nodes[0].Step != StepConverged {
		t.Errorf("after the node converged: revision %d (was %d), step %s; want a save with it converged", got.revision, renewed, got.Nodes[0].Step)
	}
}
