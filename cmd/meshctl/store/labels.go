package store

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/profile"
)

// LabelRecord is a node's labels as the labels bucket keeps them: the
// bucket's history is every change, with who made it and when.
type LabelRecord struct {
	Node     string     `json:"node"`
	Labels   labels.Set `json:"labels"`
	Operator string     `json:"operator,omitempty"`
	At       time.Time  `json:"at"`
}

// Labels is the labels bucket of one mesh: key MESH.NODE, a LabelRecord.
type Labels struct{ meshBucket }

// Labels is mesh's labels bucket.
func (s *Store) Labels(ctx context.Context, mesh string) (*Labels, error) {
	kv, err := s.KV(ctx, linkproto.LabelsBucket)
	if err != nil {
		return nil, err
	}
	return &Labels{meshBucket{kv, mesh}}, nil
}

// Decode reads a node's entry.
func (ls *Labels) Decode(e jetstream.KeyValueEntry) (LabelRecord, error) {
	return decodeJSON[LabelRecord](e, "the labels")
}

// Get is node's record and its revision; revision 0 when there is none.
func (ls *Labels) Get(ctx context.Context, node string) (LabelRecord, uint64, error) {
	rec, revision, _, err := getJSON[LabelRecord](ctx, ls.meshBucket, node, "the labels")
	return rec, revision, err
}

// Exists says whether node has labels on record.
func (ls *Labels) Exists(ctx context.Context, node string) bool {
	_, err := ls.kv.Get(ctx, Key(ls.mesh, node))
	return err == nil
}

// Put stores rec over the record read at revision (0: none);
// jetstream.ErrKeyExists or ErrKeyRevisionMismatch when it changed since.
func (ls *Labels) Put(ctx context.Context, rec LabelRecord, revision uint64) error {
	return put(ctx, ls.kv, Key(ls.mesh, rec.Node), mustJSON(rec), revision)
}

// Purge removes node's labels and their history.
func (ls *Labels) Purge(ctx context.Context, node string) error {
	return ls.kv.Purge(ctx, Key(ls.mesh, node))
}

// ProfileRecord is a profile as the profiles bucket keeps it: the bucket's
// history is every change, with who made it and when.
type ProfileRecord struct {
	profile.Profile
	Operator string    `json:"operator,omitempty"`
	At       time.Time `json:"at"`
	// Removed says the profile was removed (profile rm) by Operator at At.
	Removed bool `json:"removed,omitempty"`
	// Revision is the bucket's revision of this record (not stored).
	Revision uint64 `json:"-"`
}

// Profiles is the profiles bucket of one mesh: key MESH.NAME, a
// ProfileRecord; a removed profile is a record saying so, so the history
// keeps who removed it.
type Profiles struct{ meshBucket }

// Profiles is mesh's profiles bucket.
func (s *Store) Profiles(ctx context.Context, mesh string) (*Profiles, error) {
	kv, err := s.KV(ctx, linkproto.ProfilesBucket)
	if err != nil {
		return nil, err
	}
	return &Profiles{meshBucket{kv, mesh}}, nil
}

// Decode reads a profile's entry.
func (ps *Profiles) Decode(e jetstream.KeyValueEntry) (ProfileRecord, error) {
	rec, err := decodeJSON[ProfileRecord](e, "the profile")
	rec.Revision = e.Revision()
	return rec, err
}

// History is every record of the profile called name the bucket keeps,
// oldest first; an error wrapping jetstream.ErrKeyNotFound when it keeps
// none.
func (ps *Profiles) History(ctx context.Context, name string) ([]ProfileRecord, error) {
	hist, err := ps.kv.History(ctx, Key(ps.mesh, name))
	if err != nil {
		return nil, err
	}
	var out []ProfileRecord
	for _, e := range hist {
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		rec, err := ps.Decode(e)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, nil
}

// Revision is the bucket's revision of the profile called name; 0 when
// there is none.
func (ps *Profiles) Revision(ctx context.Context, name string) (uint64, error) {
	e, err := ps.kv.Get(ctx, Key(ps.mesh, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return e.Revision(), nil
}

// Put stores rec over the record at revision (0: none);
// jetstream.ErrKeyExists or ErrKeyRevisionMismatch when it changed since.
func (ps *Profiles) Put(ctx context.Context, rec ProfileRecord, revision uint64) error {
	return put(ctx, ps.kv, Key(ps.mesh, rec.Name), mustJSON(rec), revision)
}

// put creates key when revision is 0, else updates it at revision.
func put(ctx context.Context, kv jetstream.KeyValue, key string, value []byte, revision uint64) error {
	var err error
	if revision == 0 {
		_, err = kv.Create(ctx, key, value)
	} else {
		_, err = kv.Update(ctx, key, value, revision)
	}
	return err
}

// EachEntry hands put every entry of kv whose key filter matches, as it
// is now, without its deleted keys.
func EachEntry(ctx context.Context, kv jetstream.KeyValue, filter string, put func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil {
			// The watcher's marker: every stored value has been seen.
			return nil
		}
		put(e)
	}
	return ctx.Err()
}
