package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// offlineBed is a release rollout of three nodes stored running, for a
// driver to step by hand: web-1 the canary, alone in wave 0, silent for
// ten minutes; web-2 in wave 1, answering pushes; web-3 in wave 1, never
// heard and answering nothing.
type offlineBed struct {
	*bed
	c       *Client
	d       *driver
	r       *rollout.Rollout
	now     *time.Time
	version string
}

func newOfflineBed(t *testing.T, offlineFails bool) *offlineBed {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 4, 12, 3, 0, 0, time.UTC)
	c := b.client(now)
	c.Now = func() time.Time { return now }
	res := testRelease(1).Resource("http://127.0.0.1:4280")
	b.fakeNode("web-2", fakeNode{ack: accept(7)})
	r := &rollout.Rollout{ID: "r-1", Mesh: c.Mesh, Kind: rollout.KindRelease, State: rollout.Running, Release: res,
		Canary: 1, MaxInFlight: 2, HaltOnFailure: true, OfflineFails: offlineFails, WaitHealthy: linkproto.Duration(time.Hour),
		Nodes: []rollout.Node{{Node: "web-1", Wave: 0, Step: rollout.StepPending}, {Node: "web-2", Wave: 1, Step: rollout.StepPending}, {Node: "web-3", Wave: 1, Step: rollout.StepPending}}}
	kv, err := c.store.KV(ctx, linkproto.RolloutsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if r.BucketRevision, err = kv.Create(ctx, store.Key(c.Mesh, r.ID), mustJSON(r)); err != nil {
		t.Fatal(err)
	}
	d := &driver{c: c, holder: "serve-a", log: b.log, heartbeats: map[string]*linkproto.Heartbeat{
		"web-1": {Node: "web-1", Sent: now.Add(-10 * time.Minute), Interval: linkproto.Duration(time.Minute)},
	}}
	return &offlineBed{bed: b, c: c, d: d, r: r, now: &now, version: strings.TrimPrefix(res.Digest, "sha256:")}
}

func (o *offlineBed) step(t *testing.T) *rollout.Rollout {
	t.Helper()
	*o.now = o.now.Add(time.Second)
	if err := o.d.step(context.Background(), o.r); err != nil {
		t.Fatal(err)
	}
	got, err := o.c.GetRollout(context.Background(), o.r.ID)
	if err != nil {
		t.Fatal(err)
	}
	o.r = got
	return got
}

// running is a heartbeat of node running the release at revision.
func (o *offlineBed) running(node string, revision uint64) *linkproto.Heartbeat {
	return &linkproto.Heartbeat{Node: node, Version: o.version, Applied: revision, LastGood: revision, Desired: revision,
		Sent: *o.now, Interval: linkproto.Duration(time.Minute)}
}

func steps(r *rollout.Rollout) string {
	var s []string
	for _, n := range r.Nodes {
		s = append(s, n.Node+":"+string(n.Step))
	}
	return strings.Join(s, " ")
}

// A node offline when its wave starts (silent past its deadline, or not
// answering the push) is deferred: its declaration is stored, it neither
// holds its wave back nor halts the rollout, and it is converged when it
// reports the revision; the rollout ends naming those still outstanding.
func TestRolloutDefersOfflineNodes(t *testing.T) {
	o := newOfflineBed(t, false)
	ctx := context.Background()
	r := o.step(t)
	if got, want := steps(r), "web-1:deferred web-2:pending web-3:pending"; got != want || r.State != rollout.Running {
		t.Fatalf("after wave 0: %s, %s (%s); want %s, running", got, r.State, r.Reason, want)
	}
	if n := r.Nodes[0]; n.Revision != 1 || !strings.Contains(n.Reason, "offline when its wave started: silent") {
		t.Errorf("web-1 deferred at revision %d: %q", n.Revision, n.Reason)
	}
	if stored, err := o.c.storedFor(ctx, "web-1"); err != nil || stored == nil || stored.Revision != 1 {
		t.Errorf("web-1's declaration stored: %+v, %v; want revision 1, for its next hello", stored, err)
	}

	r = o.step(t)
	if got, want := steps(r), "web-1:deferred web-2:pushed web-3:deferred"; got != want {
		t.Fatalf("after wave 1 is pushed: %s; want %s", got, want)
	}
	if n := r.Nodes[2]; !strings.Contains(n.Reason, "did not answer the push") {
		t.Errorf("web-3 deferred: %q", n.Reason)
	}

	// web-1 comes back and runs the release: converged, while the
	// rollout goes on.
	o.d.heartbeats["web-1"] = o.running("web-1", 1)
	r = o.step(t)
	if got, want := steps(r), "web-1:converged web-2:pushed web-3:deferred"; got != want {
		t.Fatalf("after web-1 reported: %s; want %s", got, want)
	}

	o.d.heartbeats["web-2"] = o.running("web-2", 1)
	o.step(t)
	r = o.step(t)
	if r.State != rollout.Done || r.Reason != "1 node deferred, still outstanding: web-3" {
		t.Fatalf("rollout %s (%q), want done naming web-3 outstanding; %s", r.State, r.Reason, steps(r))
	}
	if got, want := r.Summary(), "2 converged, 0 unchanged, 0 failed, 1 deferred (outstanding: web-3)"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	evs, err := o.c.RolloutEvents(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, ev := range evs {
		seen = append(seen, ev.Step+" "+ev.Node)
	}
	for _, want := range []string{"deferred web-1", "deferred web-3", "converged web-1", "converged web-2", "done "} {
		if !strings.Contains(strings.Join(seen, "\n"), want) {
			t.Errorf("events lack %q: %v", want, seen)
		}
	}
}

// With --offline fail, a node offline when its wave starts fails, and a
// canary's failure halts the rollout; nothing is declared to it.
func TestRolloutOfflineFails(t *testing.T) {
	o := newOfflineBed(t, true)
	r := o.step(t)
	if got, want := steps(r), "web-1:failed web-2:pending web-3:pending"; got != want || r.State != rollout.Halted {
		t.Fatalf("%s, %s; want %s, halted", got, r.State, want)
	}
	if !strings.HasPrefix(r.Reason, "canary web-1 failed in wave 0: offline when its wave started: silent") || r.HaltedAt.IsZero() {
		t.Errorf("halted at %v: %q", r.HaltedAt, r.Reason)
	}
	if stored, _ := o.c.storedFor(context.Background(), "web-1"); stored != nil {
		t.Errorf("web-1 was declared revision %d; want nothing", stored.Revision)
	}
}

// A halted rollout is resumed once the node that halted it converged the
// revision it was pushed: refused before, with what changed since the
// halt said; after, the node is converged and the rollout runs again,
// holding the mesh's active slot.
func TestResumeHaltedOnceConverged(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	halted := time.Date(2026, 12, 4, 12, 3, 4, 0, time.UTC)
	c := b.client(halted)
	res := testRelease(1).Resource("http://127.0.0.1:4280")
	version := strings.TrimPrefix(res.Digest, "sha256:")
	r := &rollout.Rollout{ID: "r-1", Mesh: c.Mesh, Kind: rollout.KindRelease, State: rollout.Halted, HaltedAt: halted, Release: res,
		Canary: 1, MaxInFlight: 1, HaltOnFailure: true, WaitHealthy: linkproto.Duration(time.Minute),
		Reason: "canary web-1 failed in wave 0: silent",
		Nodes:  []rollout.Node{{Node: "web-1", Wave: 0, Step: rollout.StepFailed, Revision: 5, Reason: "silent"}, {Node: "web-2", Wave: 1, Step: rollout.StepPending}}}
	kv, err := c.store.KV(ctx, linkproto.RolloutsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, store.Key(c.Mesh, r.ID), mustJSON(r)); err != nil {
		t.Fatal(err)
	}
	web1 := b.node("web-1")
	// Still at revision 4: not resumed.
	web1.heartbeat(t, linkproto.Heartbeat{Version: "old", Applied: 4, LastGood: 4, Sent: time.Now(), Interval: linkproto.Duration(time.Minute)})
	_, err = c.SetRolloutState(ctx, r.ID, rollout.Running, "resumed")
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "web-1 has not converged revision 5 since") {
		t.Fatalf("resume before web-1 converged: %v", err)
	}
	if got, _ := c.GetRollout(ctx, r.ID); got.State != rollout.Halted {
		t.Fatalf("rollout %s after a refused resume", got.State)
	}
	if lines := c.SinceHalt(ctx, r); len(lines) != 0 {
		t.Errorf("since the halt, before it converged: %q", lines)
	}

	converged := time.Date(2026, 12, 4, 12, 5, 10, 0, time.UTC)
	web1.heartbeat(t, linkproto.Heartbeat{Version: version, Applied: 5, LastGood: 5, LastReconcile: converged, Sent: time.Now(), Interval: linkproto.Duration(time.Minute)})
	if lines := c.SinceHalt(ctx, r); len(lines) != 1 || lines[0] != "since the halt at 12:03:04: web-1 converged to revision 5 (12:05:10)" {
		t.Errorf("since the halt: %q", lines)
	}
	got, err := c.SetRolloutState(ctx, r.ID, rollout.Running, "resumed")
	if err != nil {
		t.Fatalf("resume after web-1 converged: %v", err)
	}
	if got.State != rollout.Running || got.Nodes[0].Step != rollout.StepConverged || !got.Nodes[0].Done.Equal(converged) {
		t.Errorf("after resume: %s, web-1 %s at %v", got.State, got.Nodes[0].Step, got.Nodes[0].Done)
	}
	// It holds the mesh's one active slot again: no other rollout starts.
	rs, err := c.store.Rollouts(ctx, c.Mesh)
	if err != nil {
		t.Fatal(err)
	}
	var busy *store.Busy
	if _, err := rs.Claim(ctx, "r-2", time.Now()); !errors.As(err, &busy) || busy.ID != "r-1" {
		t.Errorf("claim by another rollout: %v; want busy with r-1", err)
	}
}
