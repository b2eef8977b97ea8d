package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/linkproto"
)

// Key is the key of name's record in one of mesh's buckets: MESH.NAME,
// where NAME is a node, a profile, a rollout, or a token's id.
func Key(mesh, name string) string { return mesh + "." + name }

// meshBucket is one mesh's records in a bucket whose keys are Key(mesh,
// NAME), each a JSON record: the labels, profiles and presence buckets.
type meshBucket struct {
	kv   jetstream.KeyValue
	mesh string
}

// Each hands put every record of the mesh as it is now, for a Decode.
func (b meshBucket) Each(ctx context.Context, put func(jetstream.KeyValueEntry)) error {
	return EachEntry(ctx, b.kv, Key(b.mesh, "*"), put)
}

// decodeJSON reads an entry as a T; what names the record in the error
// (ErrUndecodable) when it does not decode.
func decodeJSON[T any](e jetstream.KeyValueEntry, what string) (T, error) {
	var rec T
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, fmt.Errorf("%w: %s %s: %v", ErrUndecodable, what, e.Key(), err)
	}
	return rec, nil
}

// getJSON reads name's record as a T, with its revision; found is false,
// and the revision 0, when there is none. what names the record in
// errors.
func getJSON[T any](ctx context.Context, b meshBucket, name, what string) (rec T, revision uint64, found bool, err error) {
	e, err := b.kv.Get(ctx, Key(b.mesh, name))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return rec, 0, false, nil
	case err != nil:
		return rec, 0, false, fmt.Errorf("read %s of %s: %w", what, name, err)
	}
	rec, err = decodeJSON[T](e, what)
	return rec, e.Revision(), true, err
}

// RefusedKey is the key of node's TokensRefused in the tokens bucket (a
// token's id is hex, so it is never "refused").
func RefusedKey(mesh, node string) string { return mesh + ".refused." + node }

// NodeCredential is a node's record in the nodes bucket: the key its
// credentials are signed for (the private half is the node's alone), when
// they were last signed and when they expire, and whether the key is
// revoked. The control service writes it as a node enrols and renews;
// an operator's revoke marks it revoked.
type NodeCredential struct {
	Node string `json:"node"`
	Key  string `json:"key"`
	// Token is the id of the enrolment token the key was presented with.
	Token    string    `json:"token"`
	Enrolled time.Time `json:"enrolled"`
	Issued   time.Time `json:"issued"`
	Expires  time.Time `json:"expires"`
	Revoked  time.Time `json:"revoked,omitzero"`
}

// Credential reads node's record from the nodes bucket kv, and its
// revision; nil for none.
func Credential(ctx context.Context, kv jetstream.KeyValue, mesh, node string) (*NodeCredential, uint64, error) {
	e, err := kv.Get(ctx, Key(mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("the credential of %s: %w", node, err)
	}
	var rec NodeCredential
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("the credential of %s: %w", node, err)
	}
	return &rec, e.Revision(), nil
}

// DecodeCredential reads an entry of the nodes bucket, for a listing.
func DecodeCredential(e jetstream.KeyValueEntry) (NodeCredential, error) {
	var rec NodeCredential
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return rec, fmt.Errorf("the credential %s: %w", e.Key(), err)
	}
	return rec, nil
}

// PutCredential stores rec as its node's record, whatever was there: an
// enrolment, which the token it redeemed proves.
func PutCredential(ctx context.Context, kv jetstream.KeyValue, mesh string, rec NodeCredential) error {
	_, err := kv.Put(ctx, Key(mesh, rec.Node), mustJSON(rec))
	return err
}

// UpdateCredential stores rec over node's record read at revision;
// jetstream.ErrKeyExists when it changed since.
func UpdateCredential(ctx context.Context, kv jetstream.KeyValue, mesh, node string, rec NodeCredential, revision uint64) error {
	_, err := kv.Update(ctx, Key(mesh, node), mustJSON(rec), revision)
	return err
}

// RefuseTokens stores r, refusing the tokens made for its node until
// r.Before, in the tokens bucket kv.
func RefuseTokens(ctx context.Context, kv jetstream.KeyValue, mesh string, r TokensRefused) error {
	_, err := kv.Put(ctx, RefusedKey(mesh, r.Node), mustJSON(r))
	return err
}

// RefusedTokens reads node's TokensRefused from the tokens bucket kv;
// nil when none is stored. A record that does not decode is an error
// wrapping ErrUndecodable.
func RefusedTokens(ctx context.Context, kv jetstream.KeyValue, mesh, node string) (*TokensRefused, error) {
	e, err := kv.Get(ctx, RefusedKey(mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r TokensRefused
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("%w: the record refusing the tokens of %s: %v", ErrUndecodable, node, err)
	}
	return &r, nil
}

// PutSealKey records key, the public sealing key node told as it
// enrolled, in the sealing-key bucket kv (key linkproto.DesiredKey). The
// control service writes it; the client reads it to seal secrets to
// the node.
func PutSealKey(ctx context.Context, kv jetstream.KeyValue, mesh, node, key string) error {
	_, err := kv.Put(ctx, linkproto.DesiredKey(mesh, node), []byte(key))
	return err
}

// SealKey is node's public sealing key from the sealing-key bucket kv;
// found is false when it told none (it enrolled before secrets existed).
func SealKey(ctx context.Context, kv jetstream.KeyValue, mesh, node string) (key string, found bool, err error) {
	e, err := kv.Get(ctx, linkproto.DesiredKey(mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return string(e.Value()), true, nil
}

// TokensRefused is a node's other record in the tokens bucket: the tokens
// made for it until Before are refused, because it was revoked or removed
// then. A token is redeemable for an hour by default, and an operator who
// ends a node's access means the tokens already handed out too. An
// operator's revoke or remove writes it; the control service reads it at
// each enrolment.
type TokensRefused struct {
	Node   string    `json:"node"`
	Before time.Time `json:"before"`
	Why    string    `json:"why"` // "revoked" or "removed"
}
