package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/linkproto"
)

// Presence is what the broker last said of a node's connection, as the
// presence bucket keeps it: connected or closed, when (the broker's
// clock), why it closed (the server's words: "Client Closed", "Stale
// Connection"), and which connection of which server it was. The control
// services write it from the system account's connect and disconnect
// events (nodeservice.Presence); `meshctl nodes` reads it.
type Presence struct {
	Node      string    `json:"node"`
	Connected bool      `json:"connected"`
	At        time.Time `json:"at"`
	// Since is when the connection was opened.
	Since  time.Time `json:"since,omitzero"`
	Reason string    `json:"reason,omitempty"`
	Server string    `json:"server,omitempty"`
	// Conn names the connection: its server and its id there.
	Conn string `json:"conn,omitempty"`
}

// MaxPresenceText bounds each text of a Presence: what the events carry
// is the broker's, and is cut to this before it is recorded.
const MaxPresenceText = 128

// maxPresenceRecord bounds a stored Presence: its texts at their limit,
// every byte escaped as JSON at worst, and room for the rest.
const maxPresenceRecord = 3*6*MaxPresenceText + 512

// Presences is the presence bucket of one mesh: key MESH.NODE, a Presence.
type Presences struct{ meshBucket }

// Presences is mesh's presence bucket.
func (s *Store) Presences(ctx context.Context, mesh string) (*Presences, error) {
	kv, err := s.KV(ctx, linkproto.PresenceBucket)
	if err != nil {
		return nil, err
	}
	return &Presences{meshBucket{kv, mesh}}, nil
}

// Decode reads a node's entry.
func (ps *Presences) Decode(e jetstream.KeyValueEntry) (Presence, error) {
	return decodeJSON[Presence](e, "the presence")
}

// Get is node's record and its revision; nil and 0 when there is none.
func (ps *Presences) Get(ctx context.Context, node string) (*Presence, uint64, error) {
	p, revision, found, err := getJSON[Presence](ctx, ps.meshBucket, node, "the presence")
	if !found || err != nil {
		return nil, revision, err
	}
	return &p, revision, nil
}

// Record stores p as its node's presence unless it says nothing newer
// than what is stored (see supersedes), and reports whether it did. The
// same event recorded twice, by one control service or by several serving
// one cluster, is stored once; events taken out of order leave the latest.
// A stored record that does not decode is replaced.
func (ps *Presences) Record(ctx context.Context, p Presence) (bool, error) {
	if err := p.check(); err != nil {
		return false, err
	}
	for range 8 {
		old, revision, err := ps.Get(ctx, p.Node)
		if err != nil && !errors.Is(err, ErrUndecodable) {
			return false, err
		}
		if old != nil && !p.supersedes(*old) {
			return false, nil
		}
		err = put(ctx, ps.kv, Key(ps.mesh, p.Node), mustJSON(p), revision)
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue // another service recorded one meanwhile: compare again
		}
		if err != nil {
			return false, fmt.Errorf("record the presence of %s: %w", p.Node, err)
		}
		return true, nil
	}
	return false, fmt.Errorf("record the presence of %s: changed under every attempt", p.Node)
}

// supersedes says whether p is news beside old: later, and not the close
// of a connection older than the one old says is open (the broker may
// find a connection stale after its node has reconnected on another).
func (p Presence) supersedes(old Presence) bool {
	if !p.At.After(old.At) {
		return false
	}
	if !p.Connected && old.Connected && old.Conn != p.Conn && !old.At.Before(p.Since) {
		return false
	}
	return true
}

func (p Presence) check() error {
	switch {
	case linkproto.ValidName(p.Node) != nil:
		return fmt.Errorf("%w: node %q", ErrBadPresence, p.Node)
	case p.At.IsZero():
		return fmt.Errorf("%w: no time", ErrBadPresence)
	case len(p.Reason) > MaxPresenceText || len(p.Server) > MaxPresenceText || len(p.Conn) > MaxPresenceText:
		return fmt.Errorf("%w: a text over %d bytes", ErrBadPresence, MaxPresenceText)
	}
	return nil
}
