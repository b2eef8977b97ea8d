package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/internal/fanout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Driving rollouts: each control service looks at the active rollouts
// every tick, takes the lease of a running one whose lease has lapsed (or
// is its own), and moves it on one step: push the pending nodes of the
// current wave, look at the heartbeats of the pushed ones, halt on a
// failure, and start the next wave when this one is complete. Every step
// is saved conditionally on the record read, so a pause by an operator or
// a second control service's step is never overwritten; the loser reads
// again at the next tick.

const (
	// rolloutTick is how often a control service looks at the rollouts.
	rolloutTick = 250 * time.Millisecond
	// rolloutLease is how long a control service holds a rollout it
	// drives without renewing; another takes over when it lapses.
	rolloutLease = 10 * time.Second
	// pushParallel bounds the pushes in flight at once.
	pushParallel = 64
)

// driver drives the mesh's rollouts on behalf of one control service.
type driver struct {
	c      *Client
	holder string
	log    *slog.Logger

	mu         sync.Mutex
	heartbeats map[string]*linkproto.Heartbeat // latest by node

	pushed func(outcome string) // RolloutDriver.Pushed; nil: not told
}

// RolloutDriver drives the mesh's rollouts on behalf of one control
// service: one actor of the service's run group, beside the Service that
// answers the nodes. Any number may run against one cluster; each
// rollout's lease says which drives it.
type RolloutDriver struct {
	// Conn is a connection as the control user.
	Conn *nats.Conn
	// Mesh is the mesh whose rollouts it drives.
	Mesh string
	// Key signs the declarations it pushes (the authority's declaration
	// key).
	Key nkeys.KeyPair
	// Secrets seal the secrets a rollout's declarations name; nil refuses
	// such declarations.
	Secrets *authority.Secrets
	// Log receives what it does.
	Log *slog.Logger
	// Now is its clock; time.Now when nil.
	Now func() time.Time
	// Holder names it in the rollouts it drives (default: the host name,
	// the process id and a random tail).
	Holder string
	// Pushed, when set, is told the outcome of every push it makes
	// (PushAccepted, PushRefused, PushUnanswered, PushFailed): what the
	// control service's metrics count. It must not block.
	Pushed func(outcome string)
}

// The outcomes of a push, as RolloutDriver.Pushed is told them.
const (
	// PushAccepted: the node acknowledged the declaration.
	PushAccepted = "accepted"
	// PushRefused: the node answered, refusing it (its reason is in its
	// journal and the rollout's record).
	PushRefused = "refused"
	// PushUnanswered: no node answered in time (offline, or its link
	// down): it is stored for the node's next hello.
	PushUnanswered = "unanswered"
	// PushFailed: the push itself failed, or the answer was not the
	// node's ack of that revision.
	PushFailed = "error"
)

// pushOutcome names the outcome of a push that pushStored answered with
// ack and err.
func pushOutcome(ack *linkproto.Ack, err error) string {
	switch {
	case errors.Is(err, ErrDeclarationRefused):
		return PushRefused
	case err != nil:
		return PushFailed
	case ack == nil:
		return PushUnanswered
	}
	return PushAccepted
}

// Run drives the rollouts until ctx ends. A drive that fails (the broker
// gone a while, a watch ended) starts again: the rollouts' state is in
// the bucket, and a control service that stopped driving would leave
// them to the lease of another that may not exist. Until the control
// service has made the rollouts bucket it waits, quietly.
func (d *RolloutDriver) Run(ctx context.Context) error {
	holder := d.Holder
	if holder == "" {
		holder = newHolder()
	}
	for {
		err := d.drive(ctx, holder)
		if ctx.Err() != nil {
			return nil
		}
		wait := 2 * time.Second
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			wait = rolloutTick
		} else {
			d.Log.Warn("driving rollouts; starting again", "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (rd *RolloutDriver) drive(ctx context.Context, holder string) error {
	c, err := NewClient(rd.Conn, rd.Mesh)
	if err != nil {
		return err
	}
	c.Key, c.Secrets = rd.Key, rd.Secrets
	if rd.Now != nil {
		c.Now = rd.Now
	}
	d := &driver{c: c, holder: holder, log: rd.Log, heartbeats: map[string]*linkproto.Heartbeat{}, pushed: rd.Pushed}
	// Every heartbeat of the mesh as it arrives: a wave's nodes are
	// looked up here rather than asked of the stream one by one.
	sub, err := rd.Conn.Subscribe(linkproto.AllHeartbeats(rd.Mesh), func(m *nats.Msg) {
		hb, err := decodeHeartbeat(m.Data)
		if err != nil {
			return
		}
		_, node, err := linkproto.NodeOf(m.Subject)
		if err != nil || hb.Node != node || hb.Mesh != rd.Mesh {
			return // a node speaks for itself only
		}
		d.mu.Lock()
		d.heartbeats[node] = hb
		d.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("subscribe to heartbeats: %w", err)
	}
	defer sub.Unsubscribe()
	// The active rollouts, as a watch of the bucket tells them: finished
	// ones, which may be large and many, are not read again at each tick.
	// The watch carries only each change's revision: a rollout's record
	// holds every node's step (2 MB at 10,000 nodes), and most changes
	// are this driver's own saves.
	rs, err := c.store.Rollouts(ctx, rd.Mesh)
	if err != nil {
		return err
	}
	w, err := rs.Watch(ctx, jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("watch the rollouts: %w", err)
	}
	defer w.Stop()
	active := map[string]bool{}
	// seen is the latest revision the watch told of each rollout, and
	// held the record this driver last read or saved of each active one:
	// while the two agree it is not read again.
	seen := map[string]uint64{}
	held := map[string]*rollout.Rollout{}
	t := time.NewTicker(rolloutTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("the rollouts watch ended")
			}
			if e == nil {
				continue // the initial values are all in
			}
			id := strings.TrimPrefix(e.Key(), rd.Mesh+".")
			if e.Operation() != jetstream.KeyValuePut {
				delete(active, id)
				delete(seen, id)
				delete(held, id)
				continue
			}
			seen[id] = e.Revision()
			if active[id] {
				continue // stepped at the next tick, read again if not its own
			}
			r, err := c.GetRollout(ctx, id)
			if err != nil || r.State != rollout.Running {
				continue
			}
			// A rollout just started or resumed is stepped at once, not
			// at the next tick.
			active[id], held[id] = true, r
		case <-t.C:
		}
		for id := range active {
			r := held[id]
			if r == nil || r.BucketRevision != seen[id] {
				var err error
				if r, err = c.GetRollout(ctx, id); err != nil {
					delete(held, id)
					continue
				}
			}
			if r.State != rollout.Running {
				delete(active, id)
				delete(held, id)
				continue
			}
			if err := d.step(ctx, r); err != nil {
				// What was held may differ from what is stored now.
				delete(held, id)
				if ctx.Err() == nil && !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
					d.log.Warn("rollout step", "rollout", r.ID, "err", err)
				}
				// A record changed meanwhile is read again next tick.
				continue
			}
			held[id] = r
		}
	}
}

// heartbeat is node's latest heartbeat: the one seen, or the stream's.
func (d *driver) heartbeat(ctx context.Context, node string) *linkproto.Heartbeat {
	d.mu.Lock()
	hb := d.heartbeats[node]
	d.mu.Unlock()
	if hb != nil {
		return hb
	}
	hb, err := d.c.lastHeartbeat(ctx, node)
	if err != nil || hb == nil {
		return nil
	}
	d.mu.Lock()
	if d.heartbeats[node] == nil {
		d.heartbeats[node] = hb
	}
	d.mu.Unlock()
	return hb
}

// step moves r on, if this service may drive it now. It saves r when a
// node's step or the rollout's state changed, or the lease is half spent:
// not at every tick, for the record holds every node's step.
func (d *driver) step(ctx context.Context, r *rollout.Rollout) error {
	now := d.c.Now().UTC()
	if r.Holder != "" && r.Holder != d.holder && now.Before(r.LeaseUntil) {
		return nil
	}
	if r.Holder != d.holder {
		d.log.Info("driving rollout", "rollout", r.ID, "from", r.Holder)
		r.Holder = d.holder
		r.LeaseUntil = now.Add(rolloutLease)
		// Take the lease alone first: only the winner pushes.
		if err := d.c.saveRollout(ctx, r); err != nil {
			return err
		}
	}
	// Each node's declaration says who started the rollout, and which.
	c := *d.c
	c.Operator = r.OperatorFor()

	wave := r.CurrentWave()
	if wave < 0 {
		r.State, r.Reason = rollout.Done, ""
		if deferred := r.Deferred(); len(deferred) > 0 {
			// Done with what it can push: a node deferred gets its
			// declaration with its next hello, and the record says
			// which are still to.
			r.Reason = fmt.Sprintf("%s deferred, still outstanding: %s", plural(len(deferred), "node"), strings.Join(deferred, ", "))
		}
		if err := c.saveRollout(ctx, r); err != nil {
			return err
		}
		c.rolloutEvent(ctx, r, "done", "", 0, r.Summary())
		return nil
	}

	var events []rollout.Event
	note := func(step, node string, rev uint64, detail string) {
		events = append(events, rollout.Event{Step: step, Node: node, Revision: rev, Detail: detail})
	}
	if err := d.push(ctx, &c, r, wave, note); err != nil {
		return err
	}
	d.observe(ctx, &c, r, wave, now, note)
	d.observeDeferred(ctx, r, now, note)

	if n := r.HaltIfFailed(wave); n != nil {
		r.HaltedAt = now
		note("halted", n.Node, n.Revision, r.Reason)
	}
	// Every change of a node's step or of the rollout's state is noted
	// as an event: a step that noted nothing changed nothing.
	if len(events) == 0 && now.Before(r.LeaseUntil.Add(-rolloutLease/2)) {
		return nil
	}
	r.LeaseUntil = now.Add(rolloutLease)
	if err := c.saveRollout(ctx, r); err != nil {
		return err
	}
	if err := c.rolloutEvents(ctx, r, events); err != nil {
		d.log.Warn("rollout events", "rollout", r.ID, "err", err)
	}
	return nil
}

// push renders and pushes the pending nodes of wave, at most
// pushParallel at a time. A node whose declaration is what it has is
// unchanged; one that does not render, or refuses, fails.
func (d *driver) push(ctx context.Context, c *Client, r *rollout.Rollout, wave int, note func(step, node string, rev uint64, detail string)) error {
	var pending []int
	for i, n := range r.Nodes {
		if n.Wave == wave && n.Step == rollout.StepPending {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	var f *fleet
	if r.Kind == rollout.KindProfiles {
		var err error
		if f, err = c.loadFleet(ctx); err != nil {
			return err
		}
	}
	type outcome struct {
		step     rollout.Step
		revision uint64
		before   uint64
		lastGood uint64
		online   bool
		already  bool
		deferred string // why it is deferred
		err      error
	}
	outcomes := make([]outcome, len(pending))
	// How long a wave's pushes take, for an operator asking why a
	// rollout is slow: the rest is the nodes applying.
	started := time.Now()
	defer func() {
		d.log.Info("rollout wave pushed", "rollout", r.ID, "wave", wave, "nodes", len(pending), "took", time.Since(started).Round(time.Millisecond))
	}()
	// pushAndSee pushes a stored declaration to node and sees whether it
	// answers: one that does not is offline, deferred (or failed, with
	// --offline fail) rather than waited for.
	pushAndSee := func(node string, push *linkproto.Declaration, o *outcome) {
		ack, err := c.pushStored(node, push, 2*time.Second)
		if d.pushed != nil {
			d.pushed(pushOutcome(ack, err))
		}
		switch {
		case err != nil:
			o.step, o.err = rollout.StepFailed, err
		case ack == nil && r.OfflineFails:
			o.step, o.err = rollout.StepFailed, fmt.Errorf("offline: it did not answer the push of revision %d (--offline fail)", push.Revision)
		case ack == nil:
			// Gone since its last heartbeat (stopped, or its link
			// down), or never heard: nothing answered, so it is
			// offline.
			o.step, o.deferred = rollout.StepDeferred, "offline: it did not answer the push"
		}
		o.online = ack != nil
	}
	pushed := fanout.Each(ctx, pushParallel, pending, func(k, i int) {
		node := r.Nodes[i].Node
		o := &outcomes[k]
		decl, read, err := c.rolloutDeclaration(ctx, f, r, node)
		stored := read.Declaration()
		// Offline as its wave starts, as its latest heartbeat says: a
		// push would only wait out --wait-healthy and fail.
		offline := offlineState(node, d.heartbeat(ctx, node), c.Now())
		switch {
		case err != nil:
			o.step, o.err = rollout.StepFailed, fmt.Errorf("does not render: %w", err)
			return
		case offline != "" && r.OfflineFails:
			// Nothing stored: the node fails the rollout as it is.
			o.step, o.err = rollout.StepFailed, fmt.Errorf("offline when its wave started: %s; nothing declared to it (--offline fail)", offline)
			return
		case decl == nil:
			// What it should have is stored already: unchanged if
			// the node has converged it, else pushed again (it may
			// have been pushed by a step whose record was lost to a
			// pause, or be offline since an earlier rollout deferred
			// it) and waited for. The node takes the same
			// declaration again as nothing new.
			o.step = rollout.StepUnchanged
			if stored == nil {
				return
			}
			o.revision = stored.Revision
			if done, _, _, _ := converged(r, &rollout.Node{Node: node, Revision: stored.Revision}, d.heartbeat(ctx, node)); done {
				return
			}
			o.step, o.already = rollout.StepPushed, true
			if offline != "" {
				o.step, o.deferred = rollout.StepDeferred, fmt.Sprintf("offline when its wave started: %s; stored already", offline)
				return
			}
			pushAndSee(node, read.Push, o)
			return
		}
		if stored != nil {
			o.before = stored.Revision
		}
		if hb := d.heartbeat(ctx, node); hb != nil {
			o.lastGood = hb.LastGood
		}
		push, err := c.prepareOver(ctx, node, decl, read)
		if err != nil {
			o.step, o.err = rollout.StepFailed, err
			return
		}
		o.step, o.revision = rollout.StepPushed, push.Revision
		if offline != "" {
			o.step, o.deferred = rollout.StepDeferred, fmt.Sprintf("offline when its wave started: %s", offline)
			return
		}
		pushAndSee(node, push, o)
	})
	if pushed < len(pending) {
		return ctx.Err()
	}
	now := c.Now().UTC()
	for k, i := range pending {
		n, o := &r.Nodes[i], outcomes[k]
		n.Step, n.Revision, n.Before, n.LastGood = o.step, o.revision, o.before, o.lastGood
		switch {
		case o.step == rollout.StepFailed:
			n.Reason, n.Done = firstLine(o.err.Error()), now
			note("failed", n.Node, n.Revision, n.Reason)
		case o.step == rollout.StepUnchanged:
			n.Done = now
			note("unchanged", n.Node, n.Revision, "")
		case o.step == rollout.StepDeferred:
			n.Pushed, n.Reason = now, o.deferred
			note("deferred", n.Node, n.Revision, o.deferred+": stored for its next hello")
		case o.already:
			n.Pushed = now
			note("pushed", n.Node, n.Revision, "stored already; waiting for it to converge")
		case o.online:
			n.Pushed = now
			note("pushed", n.Node, n.Revision, "accepted")
		default:
			n.Pushed = now
			note("pushed", n.Node, n.Revision, "offline: stored for its next hello")
		}
	}
	return nil
}

// observe looks at the heartbeats of wave's pushed nodes.
func (d *driver) observe(ctx context.Context, c *Client, r *rollout.Rollout, wave int, now time.Time, note func(step, node string, rev uint64, detail string)) {
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Wave != wave || n.Step != rollout.StepPushed {
			continue
		}
		hb := d.heartbeat(ctx, n.Node)
		done, failed, rolledBack, why := converged(r, n, hb)
		switch {
		case done:
			n.Step, n.Done = rollout.StepConverged, now
			note("converged", n.Node, n.Revision, "")
		case failed:
			n.Step, n.Reason, n.Done = rollout.StepFailed, why, now
			note("failed", n.Node, n.Revision, why)
			if rolledBack {
				if err := c.markBad(ctx, r, n.Node, why); err != nil {
					d.log.Warn("cannot mark the release bad", "rollout", r.ID, "err", err)
				}
			}
		case now.Sub(n.Pushed) > time.Duration(r.WaitHealthy):
			n.Step, n.Done = rollout.StepFailed, now
			n.Reason = fmt.Sprintf("did not report revision %d converged within %v", n.Revision, time.Duration(r.WaitHealthy))
			if hb == nil || now.Sub(hb.Sent) > 3*time.Duration(hb.Interval) {
				n.Reason = fmt.Sprintf("silent: no heartbeat reporting revision %d within %v", n.Revision, time.Duration(r.WaitHealthy))
			}
			note("failed", n.Node, n.Revision, n.Reason)
		}
	}
}

// observeDeferred looks at the heartbeats of the deferred nodes of every
// wave: one that reports its revision converged is converged, one that
// reports it failed is failed (without halting the wave it is in: it did
// not hold that wave back either).
func (d *driver) observeDeferred(ctx context.Context, r *rollout.Rollout, now time.Time, note func(step, node string, rev uint64, detail string)) {
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Step != rollout.StepDeferred || n.Revision == 0 {
			continue
		}
		done, failed, _, why := converged(r, n, d.heartbeat(ctx, n.Node))
		switch {
		case done:
			n.Step, n.Done, n.Reason = rollout.StepConverged, now, ""
			note("converged", n.Node, n.Revision, "deferred, converged since")
		case failed:
			n.Step, n.Done, n.Reason = rollout.StepFailed, now, why
			note("failed", n.Node, n.Revision, "deferred: "+why)
		}
	}
}

// converged says whether hb shows n done (the revision applied and
// converged; for a release, the release running) or failed (the apply
// failed, or the release was rolled back: rolledBack).
func converged(r *rollout.Rollout, n *rollout.Node, hb *linkproto.Heartbeat) (done, failed, rolledBack bool, why string) {
	if hb == nil {
		return false, false, false, ""
	}
	if r.Kind == rollout.KindRelease {
		version := strings.TrimPrefix(r.Release.Digest, "sha256:")
		switch {
		case slices.Contains(hb.Bad, version):
			return false, true, true, fmt.Sprintf("its launcher rolled release %s back to %s", short(version), VersionLabel(hb.Build, hb.Version))
		case hb.Version == version && hb.Applied >= n.Revision:
			return true, false, false, ""
		}
		return false, false, false, ""
	}
	switch {
	case hb.LastGood >= n.Revision:
		return true, false, false, ""
	case hb.Applied >= n.Revision && (hb.Result == event.ResultFailed || hb.Failed > 0):
		return false, true, false, fmt.Sprintf("revision %d applied with %s (see `meshctl journal %s`)", n.Revision, whyFailed(hb), n.Node)
	}
	return false, false, false, ""
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// newHolder names a control service uniquely among those of a cluster.
func newHolder() string {
	host, _ := os.Hostname()
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
