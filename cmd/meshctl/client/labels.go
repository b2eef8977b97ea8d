package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/internal/fanout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Labels returns every node's labels, by node.
func (c *Client) Labels(ctx context.Context) (map[string]labels.Set, error) {
	out := map[string]labels.Set{}
	ls, err := c.store.Labels(ctx, c.Mesh)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil // a control plane from before labels
	}
	if err != nil {
		return nil, err
	}
	err = decodeEach(func(put func(jetstream.KeyValueEntry)) error { return ls.Each(ctx, put) }, ls.Decode, func(rec store.LabelRecord) { out[rec.Node] = rec.Labels })
	if err != nil {
		return nil, fmt.Errorf("list the labels: %w", err)
	}
	return out, nil
}

// Label changes node's labels by edits ("key=value" sets, "key-"
// removes) and returns them as they now are. The node must be known; the
// change is stored conditionally, so two operators cannot both win.
func (c *Client) Label(ctx context.Context, node, operator string, edits []string) (labels.Set, error) {
	if err := c.MustKnow(ctx, node); err != nil {
		return nil, err
	}
	return c.LabelNew(ctx, node, operator, edits)
}

// LabelNew is Label for a node that may not be known yet: one being
// enrolled, labelled as its token is issued.
func (c *Client) LabelNew(ctx context.Context, node, operator string, edits []string) (labels.Set, error) {
	if err := linkproto.ValidName(node); err != nil {
		return nil, fmt.Errorf("%w: node: %w", ErrRefused, err)
	}
	ls, err := c.store.Labels(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	cur, rev, err := ls.Get(ctx, node)
	if err != nil {
		return nil, err
	}
	next, err := cur.Labels.Apply(edits)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	err = ls.Put(ctx, store.LabelRecord{Node: node, Labels: next, Operator: operator, At: c.Now().UTC()}, rev)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return nil, fmt.Errorf("%w: %s's labels were changed by someone else meanwhile; look, then label again", ErrRefused, node)
	}
	if err != nil {
		return nil, fmt.Errorf("store the labels of %s: %w", node, err)
	}
	return next, nil
}

// NodeEdits are the label edits for one node.
type NodeEdits struct {
	Node  string
	Edits []string
}

// labelParallel is how many nodes LabelNewMany labels at once: each is a
// read and a conditional write, so the round trips, not the broker, bound
// a batch done one by one.
const labelParallel = 32

// LabelNewMany is LabelNew for many nodes (an enrolment batch), several at
// a time. It returns the first error in the order of batch, after the
// nodes in flight are done; nodes labelled before it keep their labels.
func (c *Client) LabelNewMany(ctx context.Context, operator string, batch []NodeEdits) error {
	errs := make([]error, len(batch))
	fanout.Each(ctx, labelParallel, batch, func(i int, e NodeEdits) {
		_, errs[i] = c.LabelNew(ctx, e.Node, operator, e.Edits)
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return ctx.Err()
}
