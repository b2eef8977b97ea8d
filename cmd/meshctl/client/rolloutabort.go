package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/declaration"
)

// BadRelease returns why the release of digest is bad for the mesh, or nil
// when it is not.
func (c *Client) BadRelease(ctx context.Context, digest string) (*rollout.BadRelease, error) {
	bs, err := c.store.BadReleases(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	return bs.Get(ctx, digest)
}

// markBad records r's release bad for the mesh, the first node to roll it
// back named.
func (c *Client) markBad(ctx context.Context, r *rollout.Rollout, node, why string) error {
	bs, err := c.store.BadReleases(ctx, c.Mesh)
	if err != nil {
		return err
	}
	return bs.Mark(ctx, rollout.BadRelease{Digest: r.Release.Digest, Node: node, Reason: why, Rollout: r.ID, At: c.Now().UTC()})
}

// AbortRollout stops rollout id: no node is pushed to any more. With
// revert, each node it pushed to is declared, as a new revision, the
// declaration it had last converged before the rollout reached it (as its
// heartbeat reported then); a node that had converged none, or whose
// declaration is no longer in the bucket's history, is named and left as
// it is. What happens to each node is written to out.
func (c *Client) AbortRollout(ctx context.Context, out io.Writer, id string, revert bool) (*rollout.Rollout, error) {
	r, err := c.SetRolloutState(ctx, id, rollout.Aborted, "aborted by "+c.Operator)
	if err != nil {
		return r, err
	}
	if !revert {
		return r, nil
	}
	c2 := *c
	c2.Operator = rollout.OperatorAs(c.Operator, " reverting rollout "+r.ID)
	var problems []string
	for i := range r.Nodes {
		n := &r.Nodes[i]
		// A deferred node was declared the revision too, for its next
		// hello.
		if n.Step != rollout.StepPushed && n.Step != rollout.StepConverged && n.Step != rollout.StepFailed && n.Step != rollout.StepDeferred || n.Revision == 0 {
			continue
		}
		rev, err := c2.revert(ctx, n)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", n.Node, err))
			fmt.Fprintf(out, "%s: not reverted: %v\n", n.Node, err)
			c.rolloutEvent(ctx, r, "revert-failed", n.Node, n.Revision, err.Error())
			continue
		}
		fmt.Fprintf(out, "%s: revision %d declares again revision %d, its last known good\n", n.Node, rev, n.LastGood)
		c.rolloutEvent(ctx, r, "reverted", n.Node, rev, fmt.Sprintf("to revision %d", n.LastGood))
		n.Step, n.Revision, n.Done = rollout.StepReverted, rev, c.Now().UTC()
	}
	// The record says which nodes were reverted; a lost race here loses
	// only that summary, the declarations are stored.
	for range 10 {
		cur, err := c.GetRollout(ctx, r.ID)
		if err != nil {
			break
		}
		cur.Nodes = r.Nodes
		if err := c.saveRollout(ctx, cur); err == nil {
			r = cur
			break
		}
	}
	if len(problems) > 0 {
		return r, fmt.Errorf("%s not reverted:\n%s", plural(len(problems), "node"), strings.Join(problems, "\n"))
	}
	return r, nil
}

// revert declares n's last-known-good declaration again, one revision past
// what is stored, and returns that revision.
func (c *Client) revert(ctx context.Context, n *rollout.Node) (uint64, error) {
	if n.LastGood == 0 {
		return 0, errors.New("it had converged no declaration before the rollout")
	}
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return 0, err
	}
	hist, kept, err := desired.History(ctx, n.Node)
	if err != nil {
		return 0, fmt.Errorf("the history of its declarations: %w", err)
	}
	var good, latest *declaration.Declaration
	for _, d := range hist {
		if d.Revision == n.LastGood {
			good = d
		}
		latest = d
	}
	if good == nil {
		return 0, fmt.Errorf("revision %d is no longer in the last %d declarations kept", n.LastGood, kept)
	}
	again := *withoutSealed(good)
	again.Revision = latest.Revision + 1
	push, err := c.prepare(ctx, n.Node, &again)
	if err != nil {
		return 0, err
	}
	if _, err := c.pushStored(n.Node, push, 2*time.Second); err != nil {
		return 0, err
	}
	return push.Revision, nil
}
