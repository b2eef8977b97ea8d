package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/internal/fanout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/profile"
)

// StartRollout plans a rollout and stores it running, for the control
// service to drive. Every selected node is rendered first: a node that
// does not render refuses the whole rollout (nothing is pushed to any
// node), a node no profile selects is skipped. Only one rollout is active
// at a time in a mesh, so two cannot push one node at once.
func (c *Client) StartRollout(ctx context.Context, opt rollout.Options) (*rollout.Rollout, error) {
	sel, err := labels.Parse(opt.Selector)
	if err != nil {
		return nil, fmt.Errorf("%w: --select: %w", ErrRefused, err)
	}
	if opt.Canary < 0 {
		return nil, fmt.Errorf("%w: --canary %d: at least 0", ErrRefused, opt.Canary)
	}
	if err := linkproto.ValidOperator(c.Operator); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRefused, err)
	}
	// The listing refuses early, before every node is rendered, and
	// covers an active rollout that holds no slot; the slot, claimed
	// below, is what keeps two starts at once from both winning.
	all, err := c.Rollouts(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		if r.State.Active() {
			return nil, fmt.Errorf("%w: rollout %s is %s; resume and finish it, or abort it, first", ErrRefused, r.ID, r.State)
		}
	}
	if opt.Release != nil {
		bad, err := c.BadRelease(ctx, opt.Release.Digest)
		if err != nil {
			return nil, err
		}
		if bad != nil {
			return nil, fmt.Errorf("%w: release %s is bad for this mesh: %s rolled it back (%s) in rollout %s", ErrRefused, short(strings.TrimPrefix(bad.Digest, "sha256:")), bad.Node, bad.Reason, bad.Rollout)
		}
	}
	f, err := c.loadFleet(ctx)
	if err != nil {
		return nil, err
	}
	now := c.Now().UTC()
	r := &rollout.Rollout{ID: rollout.NewID(now), Mesh: c.Mesh, Kind: rollout.KindProfiles, Selector: opt.Selector, Operator: c.Operator,
		Created: now, Updated: now, Canary: opt.Canary, HaltOnFailure: opt.HaltOnFailure, OfflineFails: opt.OfflineFails,
		WaitHealthy: linkproto.Duration(opt.WaitHealthy), Release: opt.Release, State: rollout.Running}
	if r.WaitHealthy == 0 {
		r.WaitHealthy = linkproto.Duration(5 * time.Minute)
	}
	if opt.Release != nil {
		r.Kind = rollout.KindRelease
	}
	var nodes, problems []string
	selected, err := f.selected(sel)
	if err != nil {
		return nil, err
	}
	if r.Kind == rollout.KindRelease {
		nodes = selected
	} else {
		// Each render reads the node's stored declaration: many at once.
		errs := make([]error, len(selected))
		if fanout.Each(ctx, pushParallel, selected, func(i int, n string) {
			_, errs[i] = f.render(n)
		}) < len(selected) {
			return nil, ctx.Err()
		}
		for i, n := range selected {
			switch err := errs[i]; {
			case errors.Is(err, profile.ErrNoProfile):
				r.Skipped = append(r.Skipped, n)
			case err != nil:
				problems = append(problems, fmt.Sprintf("%s:\n%s", n, indent(err.Error())))
			default:
				nodes = append(nodes, n)
			}
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s, so nothing is pushed:\n%s", ErrRefused, doNotRender(len(problems)), strings.Join(problems, "\n"))
	}
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: the selector %q selects no node to roll out to", ErrRefused, opt.Selector)
	}
	if r.Nodes, r.MaxInFlight, err = rollout.PlanWaves(nodes, f.labels, opt.Canary, opt.MaxInFlight); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	rs, err := c.store.Rollouts(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	if len(mustJSON(r)) > linkproto.MaxDeclarationSize-welcomeRoom {
		return nil, fmt.Errorf("%w: a rollout of %d nodes does not fit one record; select fewer", ErrRefused, len(r.Nodes))
	}
	slot, err := rs.Claim(ctx, r.ID, c.Now().UTC())
	var busy *store.Busy
	if errors.As(err, &busy) {
		return nil, fmt.Errorf("%w: %v", ErrRefused, busy)
	}
	if err != nil {
		return nil, err
	}
	if err := rs.Create(ctx, r); err != nil {
		rs.Unclaim(ctx, slot)
		return nil, fmt.Errorf("store rollout %s: %w", r.ID, err)
	}
	c.rolloutEvent(ctx, r, "started", "", 0, fmt.Sprintf("%s rollout of %d nodes in %d waves by %s", r.Kind, len(r.Nodes), r.Waves(), r.Operator))
	return r, nil
}

// Rollouts returns the mesh's rollouts, oldest first.
func (c *Client) Rollouts(ctx context.Context) ([]*rollout.Rollout, error) {
	rs, err := c.store.Rollouts(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	var out []*rollout.Rollout
	err = decodeEach(func(put func(jetstream.KeyValueEntry)) error { return rs.Each(ctx, put) }, rs.Decode, func(r *rollout.Rollout) { out = append(out, r) })
	if err != nil {
		return nil, fmt.Errorf("list the rollouts: %w", err)
	}
	slices.SortFunc(out, func(a, b *rollout.Rollout) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// GetRollout returns the rollout id; "" means the latest one.
func (c *Client) GetRollout(ctx context.Context, id string) (*rollout.Rollout, error) {
	if id == "" {
		all, err := c.Rollouts(ctx)
		if err != nil {
			return nil, err
		}
		if len(all) == 0 {
			return nil, fmt.Errorf("%w: no rollout yet in mesh %s", ErrRefused, c.Mesh)
		}
		return all[len(all)-1], nil
	}
	if err := linkproto.ValidName(id); err != nil {
		return nil, fmt.Errorf("%w: rollout: %w", ErrRefused, err)
	}
	rs, err := c.store.Rollouts(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	r, err := rs.Get(ctx, id)
	if err == nil && r == nil {
		return nil, fmt.Errorf("%w: there is no rollout %s (see `meshctl rollout list`)", ErrRefused, id)
	}
	return r, err
}

// saveRollout stores r conditionally on the record it was read from, so
// that an operator's pause and a control service's step cannot both win.
func (c *Client) saveRollout(ctx context.Context, r *rollout.Rollout) error {
	rs, err := c.store.Rollouts(ctx, c.Mesh)
	if err != nil {
		return err
	}
	r.Updated = c.Now().UTC()
	return rs.Update(ctx, r)
}

// SetRolloutState pauses, resumes or aborts a rollout: from running or
// paused, and a halted one may be aborted, or resumed once every node that
// halted it has converged the revision it was pushed since (resumeHalted).
// It tries again when the driving control service wrote the record
// meanwhile.
func (c *Client) SetRolloutState(ctx context.Context, id string, to rollout.State, why string) (*rollout.Rollout, error) {
	for range 20 {
		r, err := c.GetRollout(ctx, id)
		if err != nil {
			return nil, err
		}
		var recovered []string
		slot := uint64(0)
		switch {
		case to == rollout.Running && r.State == rollout.Halted:
			if recovered, slot, err = c.resumeHalted(ctx, r); err != nil {
				return r, err
			}
		case to == rollout.Aborted && r.State == rollout.Halted:
			// A halted rollout is ended by abort, with or without a
			// revert: it is where a revert is wanted most.
		case !r.State.Active():
			return r, fmt.Errorf("%w: rollout %s is %s already", ErrRefused, r.ID, r.State)
		case to == rollout.Running && r.State == rollout.Running:
			return r, fmt.Errorf("%w: rollout %s is running already", ErrRefused, r.ID)
		case to == rollout.Paused && r.State == rollout.Paused:
			return r, fmt.Errorf("%w: rollout %s is paused already", ErrRefused, r.ID)
		}
		r.State, r.Reason = to, why
		err = c.saveRollout(ctx, r)
		if err != nil && slot != 0 {
			if rs, rerr := c.store.Rollouts(ctx, c.Mesh); rerr == nil {
				rs.Unclaim(ctx, slot)
			}
		}
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, node := range recovered {
			c.rolloutEvent(ctx, r, "converged", node, 0, "converged since the halt")
		}
		c.rolloutEvent(ctx, r, string(to), "", 0, why)
		return r, nil
	}
	return nil, fmt.Errorf("rollout %s: the record kept changing; try again", id)
}

// resumeHalted looks again at the failed nodes of the halted rollout r
// (rollout.Recover): each whose latest heartbeat shows the revision it
// was pushed converged (applied, healthy) since is converged. r may go on
// when no node that halted it is failed still; then it takes the mesh's
// active-rollout slot again (a halted rollout let it go), and returns the
// slot's revision with the nodes that converged. Otherwise it is refused,
// naming the node.
func (c *Client) resumeHalted(ctx context.Context, r *rollout.Rollout) (recovered []string, slot uint64, err error) {
	recovered, still := r.Recover(func(n rollout.Node) (time.Time, bool) {
		hb, err := c.lastHeartbeat(ctx, n.Node)
		if err != nil {
			return time.Time{}, false
		}
		if done, _, _, _ := converged(r, &n, hb); done {
			return convergedAt(hb), true
		}
		return time.Time{}, false
	})
	if still != nil {
		return nil, 0, fmt.Errorf("%w: rollout %s is halted: %s has not converged revision %d since (%s); resume it once it has, or abort it",
			ErrRefused, r.ID, still.Node, still.Revision, still.Reason)
	}
	rs, err := c.store.Rollouts(ctx, c.Mesh)
	if err != nil {
		return nil, 0, err
	}
	slot, err = rs.Claim(ctx, r.ID, c.Now().UTC())
	var busy *store.Busy
	if errors.As(err, &busy) {
		return nil, 0, fmt.Errorf("%w: %v", ErrRefused, busy)
	}
	return recovered, slot, err
}

// convergedAt is when hb says its node converged what it reports: its
// last reconcile, or when it was sent.
func convergedAt(hb *linkproto.Heartbeat) time.Time {
	if !hb.LastReconcile.IsZero() {
		return hb.LastReconcile.UTC()
	}
	return hb.Sent.UTC()
}

// SinceHalt is what changed since r halted: each failed node whose latest
// heartbeat shows the revision it was pushed converged, with when, and
// each deferred node that has; "since the halt at 12:03:04: web-2
// converged to revision 5 (12:05:10)".
func (c *Client) SinceHalt(ctx context.Context, r *rollout.Rollout) []string {
	var out []string
	for i := range r.Nodes {
		n := &r.Nodes[i]
		if n.Step != rollout.StepFailed && n.Step != rollout.StepDeferred || n.Revision == 0 {
			continue
		}
		hb, err := c.lastHeartbeat(ctx, n.Node)
		if err != nil {
			continue
		}
		if done, _, _, _ := converged(r, n, hb); done {
			at := convergedAt(hb)
			line := fmt.Sprintf("%s converged to revision %d (%s)", n.Node, n.Revision, at.Format(time.TimeOnly))
			if r.State == rollout.Halted && !r.HaltedAt.IsZero() {
				line = fmt.Sprintf("since the halt at %s: %s", r.HaltedAt.Format(time.TimeOnly), line)
			}
			out = append(out, line)
		}
	}
	return out
}

// rolloutEvent records a step in the rollout events stream. A step that
// cannot be recorded is logged by the caller's state, not lost: the
// rollout's record holds every node's step too.
func (c *Client) rolloutEvent(ctx context.Context, r *rollout.Rollout, step, node string, revision uint64, detail string) {
	_ = c.rolloutEvents(ctx, r, []rollout.Event{{Step: step, Node: node, Revision: revision, Detail: detail}})
}

// rolloutEvents publishes the steps of r in order, a batch sent before its
// acknowledgements are awaited: a wave of 1,000 nodes makes as many
// events, and a round trip each held the driver's next look at the
// heartbeats back by about a second. It returns the first failure.
func (c *Client) rolloutEvents(ctx context.Context, r *rollout.Rollout, events []rollout.Event) error {
	subject := linkproto.RolloutEventSubject(c.Mesh, r.ID)
	at := c.Now().UTC()
	for batch := range slices.Chunk(events, rolloutEventsBatch) {
		acks := make([]jetstream.PubAckFuture, 0, len(batch))
		for _, ev := range batch {
			ev.Rollout, ev.At, ev.Operator = r.ID, at, c.Operator
			ack, err := c.js.PublishAsync(subject, mustJSON(ev))
			if err != nil {
				return fmt.Errorf("publish rollout %s's %s of %s: %w", r.ID, ev.Step, ev.Node, err)
			}
			acks = append(acks, ack)
		}
		for _, ack := range acks {
			select {
			case <-ack.Ok():
			case err := <-ack.Err():
				return fmt.Errorf("publish rollout %s's events: %w", r.ID, err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// rolloutEventsBatch is under nats.go's bound on unacknowledged
// asynchronous publishes (4,000), past which a publish stalls and fails.
const rolloutEventsBatch = 1000

// RolloutEvents returns the steps of rollout id, oldest first.
func (c *Client) RolloutEvents(ctx context.Context, id string) ([]rollout.Event, error) {
	s, err := c.store.Stream(ctx, linkproto.RolloutEventsStream)
	if err != nil {
		return nil, err
	}
	subject := linkproto.RolloutEventSubject(c.Mesh, id)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, err
	}
	want := info.State.Subjects[subject]
	if want == 0 {
		return nil, nil
	}
	p, err := store.NewPuller(ctx, s, jetstream.ConsumerConfig{FilterSubject: subject})
	if err != nil {
		return nil, err
	}
	defer p.Close(ctx)
	var out []rollout.Event
	for read := uint64(0); read < want; {
		msgs, err := p.Next(ctx, int(min(want-read, 500)), 2*time.Second)
		if err != nil {
			return out, err
		}
		if len(msgs) == 0 {
			break
		}
		read += uint64(len(msgs))
		for _, m := range msgs {
			var ev rollout.Event
			if json.Unmarshal(m.Data(), &ev) == nil {
				out = append(out, ev)
			}
		}
	}
	return out, nil
}

// rolloutDeclaration is what a rollout pushes node: its profiles'
// declaration, or its stored one with the release; nil when that is what
// is stored already. The stored entry it was made over comes beside it
// (nil: none), to be stored over.
func (c *Client) rolloutDeclaration(ctx context.Context, f *fleet, r *rollout.Rollout, node string) (*declaration.Declaration, *store.Entry, error) {
	if r.Kind == rollout.KindRelease {
		read, err := c.readStored(ctx, node)
		if err != nil {
			return nil, nil, err
		}
		d, changed, err := withRelease(read.Declaration(), c.Mesh, node, r.Release)
		if err != nil || !changed {
			return nil, read, err
		}
		return d, read, nil
	}
	rd, err := f.render(node)
	switch {
	case err != nil:
		return nil, nil, err
	case !rd.Changed:
		return nil, rd.read, nil
	}
	return rd.Declaration, rd.read, nil
}

// doNotRender says how many nodes do not render, in agreement.
func doNotRender(n int) string {
	if n == 1 {
		return "1 node does not render"
	}
	return fmt.Sprintf("%d nodes do not render", n)
}
