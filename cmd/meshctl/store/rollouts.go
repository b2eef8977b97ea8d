package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Rollouts is the rollouts bucket of one mesh: each rollout's record (key
// MESH.ID, a rollout.Rollout) and the active-rollout slot. Every save of
// a record is conditional on the revision it was read at, so an
// operator's pause and a control service's step cannot both win.
type Rollouts struct {
	kv   jetstream.KeyValue
	mesh string
}

// Rollouts is mesh's rollouts bucket.
func (s *Store) Rollouts(ctx context.Context, mesh string) (*Rollouts, error) {
	kv, err := s.KV(ctx, linkproto.RolloutsBucket)
	if err != nil {
		return nil, err
	}
	return &Rollouts{kv: kv, mesh: mesh}, nil
}

// Get is rollout id's record; nil when there is none.
func (rs *Rollouts) Get(ctx context.Context, id string) (*rollout.Rollout, error) {
	e, err := rs.kv.Get(ctx, Key(rs.mesh, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read rollout %s: %w", id, err)
	}
	return rs.Decode(e)
}

// Each hands put every rollout's entry as it is now, for Decode: a
// listing decodes them where it likes (many at once; a record holds
// every node's step).
func (rs *Rollouts) Each(ctx context.Context, put func(jetstream.KeyValueEntry)) error {
	return EachEntry(ctx, rs.kv, Key(rs.mesh, "*"), put)
}

// IDs lists the rollouts' IDs from the bucket's keys alone, none of the
// records read: a metrics scrape picks the few it shows (rollout.NewID
// sorts by when each was created) without reading every record, which
// at 10,000 nodes is 2 MB each.
func (rs *Rollouts) IDs(ctx context.Context) ([]string, error) {
	keys, err := rs.kv.ListKeysFiltered(ctx, Key(rs.mesh, "*"))
	if err != nil {
		return nil, err
	}
	var out []string
	seen := map[string]bool{} // a key written during the listing may come twice
	for k := range keys.Keys() {
		id := strings.TrimPrefix(k, rs.mesh+".")
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out, nil
}

// ActiveID is the ID of the rollout the active-rollout slot names; ""
// when the slot is empty. The rollout it names may no longer be active
// (see Claim): its record says.
func (rs *Rollouts) ActiveID(ctx context.Context) (string, error) {
	e, err := rs.kv.Get(ctx, ActiveKey(rs.mesh))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var held activeSlot
	if json.Unmarshal(e.Value(), &held) != nil || linkproto.ValidName(held.Rollout) != nil {
		return "", nil // an unreadable slot is stale, as Claim takes it
	}
	return held.Rollout, nil
}

// Watch watches the rollouts' records (not the slot) with opts.
func (rs *Rollouts) Watch(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	return rs.kv.WatchFiltered(ctx, []string{Key(rs.mesh, "*")}, opts...)
}

// Decode reads a rollout's entry.
func (rs *Rollouts) Decode(e jetstream.KeyValueEntry) (*rollout.Rollout, error) {
	var r rollout.Rollout
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, fmt.Errorf("rollout %s: %w", e.Key(), err)
	}
	r.BucketRevision = e.Revision()
	return &r, nil
}

// Create stores r as a new rollout.
func (rs *Rollouts) Create(ctx context.Context, r *rollout.Rollout) error {
	rev, err := rs.kv.Create(ctx, Key(rs.mesh, r.ID), mustJSON(r))
	if err != nil {
		return err
	}
	r.BucketRevision = rev
	return nil
}

// Update stores r over the record it was read from (r.BucketRevision);
// jetstream.ErrKeyExists when that changed meanwhile. A rollout saved
// no longer active frees the active-rollout slot.
func (rs *Rollouts) Update(ctx context.Context, r *rollout.Rollout) error {
	rev, err := rs.kv.Update(ctx, Key(rs.mesh, r.ID), mustJSON(r), r.BucketRevision)
	if err != nil {
		return err
	}
	r.BucketRevision = rev
	if !r.State.Active() {
		rs.freeSlot(ctx, r.ID)
	}
	return nil
}

// The one active rollout of a mesh is named by a key of its own in the
// rollouts bucket, created atomically: two operators listing the rollouts
// at once would both see none active, but only one of them creates the
// key. The key is deleted when the rollout it names stops being active.
// A key left behind (a start or a save that did not finish) names a
// rollout that is not active, and the next start takes it over at the
// revision it read, so that of two such starts only one wins.

// ActiveKey is the key of mesh's active-rollout slot. It has one token
// more than a rollout's key, so listing and watching the rollouts
// (MESH.*) never see it.
func ActiveKey(mesh string) string { return mesh + ".active.rollout" }

// activeSlot is the value of the active-rollout slot.
type activeSlot struct {
	Rollout string    `json:"rollout"`
	Claimed time.Time `json:"claimed"`
}

// slotGrace is how long a slot naming a rollout with no record yet is
// taken for a start under way rather than one that failed half way.
const slotGrace = time.Minute

// Busy is returned by Claim when another rollout holds the slot, or the
// slot kept changing: the start is to be refused, saying so.
type Busy struct {
	// ID and State are the rollout that is active; State is "" while it
	// is starting, and ID too when the slot kept changing.
	ID    string
	State rollout.State
}

func (b *Busy) Error() string {
	switch {
	case b.ID == "":
		return "the active rollout kept changing; try again"
	case b.State == "":
		return fmt.Sprintf("rollout %s is starting", b.ID)
	}
	return fmt.Sprintf("rollout %s is %s; resume and finish it, or abort it, first", b.ID, b.State)
}

// Claim makes rollout id the mesh's active one, as of now, and returns
// the slot's revision; *Busy when another is active.
func (rs *Rollouts) Claim(ctx context.Context, id string, now time.Time) (uint64, error) {
	key := ActiveKey(rs.mesh)
	value := mustJSON(activeSlot{Rollout: id, Claimed: now})
	for range 10 {
		rev, err := rs.kv.Create(ctx, key, value)
		if err == nil {
			return rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, fmt.Errorf("claim the active rollout: %w", err)
		}
		e, err := rs.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // freed meanwhile
		}
		if err != nil {
			return 0, fmt.Errorf("read the active rollout: %w", err)
		}
		var held activeSlot
		_ = json.Unmarshal(e.Value(), &held) // an unreadable slot is stale
		if linkproto.ValidName(held.Rollout) == nil {
			r, err := rs.Get(ctx, held.Rollout)
			switch {
			case err != nil:
				return 0, err
			case r != nil && r.State.Active():
				return 0, &Busy{ID: r.ID, State: r.State}
			case r == nil && now.Sub(held.Claimed) < slotGrace:
				return 0, &Busy{ID: held.Rollout}
			}
		}
		rev, err = rs.kv.Update(ctx, key, value, e.Revision())
		if err == nil {
			return rev, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return 0, fmt.Errorf("claim the active rollout: %w", err)
		}
	}
	return 0, &Busy{}
}

// Unclaim gives back the slot claimed at revision: the start that
// claimed it failed before its rollout was stored.
func (rs *Rollouts) Unclaim(ctx context.Context, revision uint64) {
	_ = rs.kv.Delete(ctx, ActiveKey(rs.mesh), jetstream.LastRevision(revision))
}

// freeSlot deletes the slot if it names rollout id, at the revision read,
// so a slot another start has taken over is left alone. A slot it fails
// to free is stale, and taken over by the next start.
func (rs *Rollouts) freeSlot(ctx context.Context, id string) {
	e, err := rs.kv.Get(ctx, ActiveKey(rs.mesh))
	if err != nil {
		return
	}
	var held activeSlot
	if json.Unmarshal(e.Value(), &held) != nil || held.Rollout != id {
		return
	}
	_ = rs.kv.Delete(ctx, ActiveKey(rs.mesh), jetstream.LastRevision(e.Revision()))
}

// mustJSON encodes a record; every record type encodes.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("store: does not encode: " + err.Error())
	}
	return b
}

// BadReleases is the bad-releases bucket of one mesh: each host release a
// node rolled back in a rollout (key MESH.HEX, the release's digest; a
// rollout.BadRelease), which no rollout delivers again.
type BadReleases struct {
	kv   jetstream.KeyValue
	mesh string
}

// BadReleases is mesh's bad-releases bucket.
func (s *Store) BadReleases(ctx context.Context, mesh string) (*BadReleases, error) {
	kv, err := s.KV(ctx, linkproto.BadReleasesBucket)
	if err != nil {
		return nil, err
	}
	return &BadReleases{kv: kv, mesh: mesh}, nil
}

func (bs *BadReleases) key(digest string) string {
	return Key(bs.mesh, strings.TrimPrefix(digest, "sha256:"))
}

// Get is why the release of digest is bad, nil when it is not.
func (bs *BadReleases) Get(ctx context.Context, digest string) (*rollout.BadRelease, error) {
	e, err := bs.kv.Get(ctx, bs.key(digest))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the bad releases: %w", err)
	}
	var b rollout.BadRelease
	if err := json.Unmarshal(e.Value(), &b); err != nil {
		return nil, fmt.Errorf("bad release %s: %w", e.Key(), err)
	}
	return &b, nil
}

// Mark records b's release bad, unless a node said so first: the first
// to roll it back is the one named.
func (bs *BadReleases) Mark(ctx context.Context, b rollout.BadRelease) error {
	_, err := bs.kv.Create(ctx, bs.key(b.Digest), mustJSON(b))
	if errors.Is(err, jetstream.ErrKeyExists) {
		return nil
	}
	return err
}
