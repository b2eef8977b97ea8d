package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// ErrUnknownNode is returned for a node the mesh does not know: never
// enrolled, nothing declared for it, never heard.
var ErrUnknownNode = errors.New("unknown node")

// Known reports whether the mesh knows node: it has a credential on record
// (enrolled, even if revoked since), desired state, labels (given as its
// token was issued), or a heartbeat.
func (c *Client) Known(ctx context.Context, node string) (bool, error) {
	if err := linkproto.ValidName(node); err != nil {
		return false, err
	}
	if kv, err := c.store.KV(ctx, linkproto.NodesBucket); err == nil {
		rec, _, err := store.Credential(ctx, kv, c.Mesh, node)
		if err != nil {
			return false, err
		}
		if rec != nil {
			return true, nil
		}
	} else if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return false, fmt.Errorf("the nodes bucket: %w", err)
	}
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return false, err
	}
	if ok, err := desired.Exists(ctx, node); err != nil {
		return false, fmt.Errorf("read the desired state of %s: %w", node, err)
	} else if ok {
		return true, nil
	}
	// Labelled as its token was issued: enrolled, but not yet redeemed.
	if ls, err := c.store.Labels(ctx, c.Mesh); err == nil {
		if ls.Exists(ctx, node) {
			return true, nil
		}
	}
	hb, err := c.lastHeartbeat(ctx, node)
	if err != nil {
		return false, err
	}
	return hb != nil, nil
}

// MustKnow returns ErrUnknownNode, naming the node and what to do, when
// the mesh does not know node.
func (c *Client) MustKnow(ctx context.Context, node string) error {
	known, err := c.Known(ctx, node)
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("%w: mesh %s has no node %s (never enrolled, nothing declared, never heard): `meshctl nodes` lists the nodes; `meshctl enrol %s` adds it", ErrUnknownNode, c.Mesh, node, node)
	}
	return nil
}

// Removed says what Remove did.
type Removed struct {
	Revoked  string // the key revoked now ("" when none, or revoked before)
	Desired  bool   // its desired state was deleted
	Reports  uint64 // heartbeats and reports purged
	Credited bool   // its credential record was deleted
}

// Remove takes node out of the mesh: its key is revoked (so it cannot
// connect, now or with a copy of its credentials), every enrolment token
// made for it until now is refused, and its credential
// record, labels, desired state, latest heartbeat and latest report are
// deleted,
// so that `nodes` no longer lists it. Its records in the events stream
// stay: they are the history of what it did, and `meshctl journal` still
// reads them. Enrolling it again starts it afresh.
func (c *Client) Remove(ctx context.Context, node string, r keyRevoker) (*Removed, error) {
	if err := c.MustKnow(ctx, node); err != nil {
		return nil, err
	}
	var out Removed
	rec, err := c.revoke(ctx, node, r, "removed")
	switch {
	case errors.Is(err, ErrNoRecord):
	case err != nil:
		return nil, err
	case rec != nil:
		out.Revoked = rec.Key
	}
	if kv, err := c.store.KV(ctx, linkproto.NodesBucket); err == nil {
		if err := kv.Purge(ctx, store.Key(c.Mesh, node)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return &out, fmt.Errorf("delete the credential of %s: %w", node, err)
		}
		out.Credited = rec != nil
	}
	if ls, err := c.store.Labels(ctx, c.Mesh); err == nil {
		if err := ls.Purge(ctx, node); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			return &out, fmt.Errorf("delete the labels of %s: %w", node, err)
		}
	}
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return &out, err
	}
	if ok, _ := desired.Exists(ctx, node); ok {
		if err := desired.Purge(ctx, node); err != nil {
			return &out, fmt.Errorf("delete the desired state of %s: %w", node, err)
		}
		out.Desired = true
	}
	for _, p := range []struct{ stream, subject string }{
		{linkproto.HeartbeatsStream, linkproto.HeartbeatSubject(c.Mesh, node)},
		{linkproto.StatesStream, linkproto.StateSubject(c.Mesh, node)},
	} {
		s, err := c.store.Stream(ctx, p.stream)
		if err != nil {
			return &out, err
		}
		before, _ := s.Info(ctx, jetstream.WithSubjectFilter(p.subject))
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(p.subject)); err != nil {
			return &out, fmt.Errorf("purge %s: %w", p.subject, err)
		}
		if before != nil {
			out.Reports += before.State.Subjects[p.subject]
		}
	}
	return &out, nil
}
