package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// refuseTokens refuses every token made for node until now: it is being
// revoked or removed (why).
func (c *Client) refuseTokens(ctx context.Context, node, why string) error {
	kv, err := c.store.KV(ctx, linkproto.TokensBucket)
	if err != nil {
		return err
	}
	if err := store.RefuseTokens(ctx, kv, c.Mesh, store.TokensRefused{Node: node, Before: c.Now().UTC(), Why: why}); err != nil {
		return fmt.Errorf("refuse the tokens made for %s: %w", node, err)
	}
	return nil
}

// keyRevoker revokes node keys: what Client.Revoke needs of nodeservice.Accounts.
type keyRevoker interface {
	Revoke(ctx context.Context, keys ...string) error
}

// Revoke ends node's access at once: every enrolment token made for it
// until now is refused (one not yet redeemed would let it back), its
// record is marked revoked (so no control service renews it), then its
// key is revoked in the mesh account the broker enforces, which closes
// its connection and refuses it from then on. Revoking a revoked node
// pushes the revocation again. A node that never enrolled has no record
// (ErrNoRecord), and its tokens are refused all the same.
func (c *Client) Revoke(ctx context.Context, node string, r keyRevoker) (*store.NodeCredential, error) {
	return c.revoke(ctx, node, r, "revoked")
}

func (c *Client) revoke(ctx context.Context, node string, r keyRevoker, why string) (*store.NodeCredential, error) {
	if err := linkproto.ValidName(node); err != nil {
		return nil, err
	}
	if err := c.refuseTokens(ctx, node, why); err != nil {
		return nil, err
	}
	kv, err := c.store.KV(ctx, linkproto.NodesBucket)
	if err != nil {
		return nil, err
	}
	rec, rev, err := store.Credential(ctx, kv, c.Mesh, node)
	if err != nil {
		return nil, err
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: %s has no credential on record: it never enrolled with a token of this mesh (any token made for it until now is refused)", ErrNoRecord, node)
	}
	if rec.Revoked.IsZero() {
		rec.Revoked = c.Now().UTC()
		if err := store.UpdateCredential(ctx, kv, c.Mesh, node, *rec, rev); err != nil {
			return nil, fmt.Errorf("mark %s revoked: %w", node, err)
		}
	}
	if err := r.Revoke(ctx, rec.Key); err != nil {
		return rec, err
	}
	return rec, nil
}

// credentials reads every node's record; none when the bucket is not
// there yet (a control service older than credentials).
func (c *Client) credentials(ctx context.Context) (map[string]store.NodeCredential, error) {
	out := map[string]store.NodeCredential{}
	kv, err := c.store.KV(ctx, linkproto.NodesBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the nodes bucket: %w", err)
	}
	err = decodeEntries(ctx, kv, store.Key(c.Mesh, "*"), store.DecodeCredential, func(rec store.NodeCredential) { out[rec.Node] = rec })
	if err != nil {
		return nil, fmt.Errorf("list the credentials: %w", err)
	}
	return out, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("control: does not encode: " + err.Error())
	}
	return b
}
