package projector

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Reader is where a stored projection is read from: the journal's projection
// or snapshot bucket, inside a read transaction. Reader and Store are aliases
// of interface literals, identical to the journal's View and Store, so that
// Stored.Fold is a journal.FoldFunc without either package importing the
// other.
type Reader = interface {
	Get(key []byte) []byte
	ForEach(fn func(k, v []byte) error) error
}

// Store is where the journal keeps the projection inside its append
// transaction: a bbolt bucket has exactly these methods.
type Store = interface {
	Reader
	Put(key, value []byte) error
	Delete(key []byte) error
}

// The stored layout. The projection is split so that an append rewrites
// only what its records changed: a quiet timer reconcile rewrites the small
// core, not a thousand owned resources or the declaration document.
//
//	format          the layout: "2" (absent: layout 1)
//	core            the State without Desired and Owned, as JSON
//	desired         the Desired, as JSON (absent before the first declaration)
//	desired-ref     its revision, digest and seq, and the checksum of the
//	                desired value they were written with (see desiredRef)
//	pending-plan    the plan of the reconcile in progress, with its seq
//	                (see pendingSeqSize); the core's Pending holds none
//	owned/<id>      one Owned, in the binary form of owned.go
//
// In layout 2 every value but format's ends with a checksum (see seal):
// bbolt checksums none of its pages, and a flipped byte in the projection
// must stop the host, not steer it. Layout 1, written before checksums, is
// read as it is; the first Fold into it rewrites every value in layout 2.
const (
	keyFormat      = "format"
	keyCore        = "core"
	keyDesired     = "desired"
	keyDesiredRef  = "desired-ref"
	keyPendingPlan = "pending-plan"
	prefixOwned    = "owned/"
)

// storedFormat is the layout Fold writes.
var storedFormat = []byte("2")

// castagnoli is the CRC-32C table: the checksum records use too.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksumSize is the length of a value's checksum.
const checksumSize = 4

// seal returns v followed by the CRC-32C of key and v: a byte flipped in
// the value, or in the key (which would make it another resource's), fails
// unseal.
func seal(key string, v []byte) []byte {
	out := make([]byte, len(v), len(v)+checksumSize)
	copy(out, v)
	return binary.BigEndian.AppendUint32(out, checksum(key, v))
}

func checksum(key string, v []byte) uint32 {
	c := crc32.Update(0, castagnoli, []byte(key))
	c = crc32.Update(c, castagnoli, []byte{0})
	return crc32.Update(c, castagnoli, v)
}

// sealedSum is the checksum a sealed value ends with; false when v is too
// short to hold one.
func sealedSum(v []byte) (uint32, bool) {
	if len(v) < checksumSize {
		return 0, false
	}
	return binary.BigEndian.Uint32(v[len(v)-checksumSize:]), true
}

// unseal returns the value sealed under key, without its checksum; in
// layout 1 (sealed false) v is returned as it is.
func unseal(key string, v []byte, sealed bool) ([]byte, error) {
	if !sealed {
		return v, nil
	}
	sum, ok := sealedSum(v)
	if !ok {
		return nil, fmt.Errorf("%w: %s: %d bytes, too short for its checksum", ErrCorrupt, key, len(v))
	}
	if checksum(key, v[:len(v)-checksumSize]) != sum {
		return nil, fmt.Errorf("%w: %s: checksum mismatch", ErrCorrupt, key)
	}
	return v[:len(v)-checksumSize], nil
}

// layout reports whether r's values are sealed (layout 2) or not (layout
// 1, or an empty store), and refuses a layout this version does not know.
func layout(r Reader) (sealed bool, err error) {
	f := r.Get([]byte(keyFormat))
	switch {
	case f == nil:
		return false, nil
	case bytes.Equal(f, storedFormat):
		return true, nil
	}
	return false, fmt.Errorf("%w: unknown stored layout %q", ErrCorrupt, f)
}

// errNoCore: Fold writes the core with the format, and every fold after,
// so a layout-2 projection without one lost it (or its key was damaged).
var errNoCore = fmt.Errorf("%w: core is missing", ErrCorrupt)

// get returns the value under key, checked and without its checksum; nil
// when there is none.
func get(r Reader, key string, sealed bool) ([]byte, error) {
	v := r.Get([]byte(key))
	if v == nil {
		return nil, nil
	}
	return unseal(key, v, sealed)
}

// Load reads the State stored by Stored.Fold. An empty store is the zero
// State, which is what the journal holds before its first record.
func Load(r Reader) (State, error) {
	return load(r, true)
}

// LoadCore is Load without the owned set: every owned resource is still
// read and checked (a byte flipped in one is damage, found by every whole
// read), but none is kept; State.Owned is nil. A reconcile reads the
// owned set once, with EachOwned, rather than hold them all (some
// 450 bytes each) for its whole length.
func LoadCore(r Reader) (State, error) {
	return load(r, false)
}

// loadCoreOnly reads the stored State's core alone: no Desired, no owned
// set. sealed says the store's layout.
func loadCoreOnly(r Reader) (s State, sealed bool, err error) {
	if sealed, err = layout(r); err != nil {
		return State{}, false, err
	}
	core, err := get(r, keyCore, sealed)
	if err != nil {
		return State{}, false, err
	}
	if sealed && core == nil {
		return State{}, false, errNoCore
	}
	if len(core) > 0 {
		if err := json.Unmarshal(core, &s); err != nil {
			return State{}, false, fmt.Errorf("%w: core: %w", ErrCorrupt, err)
		}
	}
	s.Desired, s.Owned = nil, nil
	return s, sealed, nil
}

func load(r Reader, keepOwned bool) (State, error) {
	s, sealed, err := loadCoreOnly(r)
	if err != nil {
		return State{}, err
	}
	if s.Desired, err = loadDesired(r, sealed); err != nil {
		return State{}, err
	}
	if sealed {
		// Not needed here, but a byte flipped in it is damage all the
		// same, found by every whole read.
		if _, err := storedDesiredRef(r); err != nil {
			return State{}, err
		}
		if err := loadPendingPlan(r, s.Pending); err != nil {
			return State{}, err
		}
	}
	err = eachOwned(r, sealed, func(id string, o Owned) error {
		if !keepOwned {
			return nil
		}
		if s.Owned == nil {
			s.Owned = make(map[string]Owned)
		}
		s.Owned[id] = o
		return nil
	})
	if err != nil {
		return State{}, err
	}
	s.normalise()
	return s, nil
}

// EachOwned calls fn with every owned resource of the stored State, in
// the order of their IDs, each checked as Load checks it, until fn
// returns an error.
func EachOwned(r Reader, fn func(id string, o Owned) error) error {
	sealed, err := layout(r)
	if err != nil {
		return err
	}
	return eachOwned(r, sealed, fn)
}

func eachOwned(r Reader, sealed bool, fn func(id string, o Owned) error) error {
	return r.ForEach(func(k, v []byte) error {
		id, ok := strings.CutPrefix(string(k), prefixOwned)
		if !ok {
			return nil
		}
		b, err := unseal(string(k), v, sealed)
		if err != nil {
			return err
		}
		o, err := decodeOwned(b)
		if err != nil {
			return fmt.Errorf("%w: owned %q: %w", ErrCorrupt, id, err)
		}
		return fn(id, o)
	})
}

// LoadDesired reads only the Desired part of the State stored by
// Stored.Fold (nil before the first declaration): what admitting a new
// declaration needs, without decoding every owned resource.
func LoadDesired(r Reader) (*Desired, error) {
	sealed, err := layout(r)
	if err != nil {
		return nil, err
	}
	return loadDesired(r, sealed)
}

func loadDesired(r Reader, sealed bool) (*Desired, error) {
	b, err := get(r, keyDesired, sealed)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	d := new(Desired)
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("%w: desired: %w", ErrCorrupt, err)
	}
	return d, nil
}

// loadDesiredRef reads the stored Desired's revision, digest and seq, and
// none of its resources or document (nil before the first declaration).
// Every append that completes a reconcile needs them: from desired-ref,
// small, when it was written with the desired value stored now; else
// (written by an older version, or by none) from the desired value, which
// holds a line for every resource declared. That second path can go once
// no host can roll back to a version before desired-ref (793a86c) and
// every journal has stored a declaration since.
func loadDesiredRef(r Reader, sealed bool) (*Desired, error) {
	if sealed {
		d, err := storedDesiredRef(r)
		if d != nil || err != nil {
			return d, err
		}
	}
	b, err := get(r, keyDesired, sealed)
	if err != nil || len(b) == 0 {
		return nil, err
	}
	var ref desiredRef
	if err := json.Unmarshal(b, &ref); err != nil {
		return nil, fmt.Errorf("%w: desired: %w", ErrCorrupt, err)
	}
	return &Desired{Revision: ref.Revision, Digest: ref.Digest, Seq: ref.Seq}, nil
}

// desiredRef is the desired-ref key's value. Of is the checksum that ends
// the sealed desired value it was written with: a version that writes the
// desired value and not this key (one rolled back to) leaves a ref whose
// Of no longer matches, and it is not used.
type desiredRef struct {
	Revision uint64 `json:"revision"`
	Digest   string `json:"digest"`
	Seq      uint64 `json:"seq"`
	Of       uint32 `json:"of,omitempty"`
}

// storedDesiredRef reads desired-ref: nil when there is none or it is not
// of the desired value stored; ErrCorrupt when it is damaged.
func storedDesiredRef(r Reader) (*Desired, error) {
	b, err := get(r, keyDesiredRef, true)
	if err != nil || b == nil {
		return nil, err
	}
	var ref desiredRef
	if err := json.Unmarshal(b, &ref); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, keyDesiredRef, err)
	}
	if of, ok := sealedSum(r.Get([]byte(keyDesired))); !ok || of != ref.Of {
		return nil, nil
	}
	return &Desired{Revision: ref.Revision, Digest: ref.Digest, Seq: ref.Seq}, nil
}

// putDesired stores d as the desired value and its desired-ref.
func putDesired(st Store, d *Desired) error {
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	v := seal(keyDesired, b)
	if err := st.Put([]byte(keyDesired), v); err != nil {
		return err
	}
	return putDesiredRef(st, d, v)
}

// putDesiredRef stores the desired-ref of d, stored sealed as v.
func putDesiredRef(st Store, d *Desired, v []byte) error {
	of, _ := sealedSum(v) // v is sealed here: it has one
	ref, err := json.Marshal(desiredRef{Revision: d.Revision, Digest: d.Digest, Seq: d.Seq, Of: of})
	if err != nil {
		return err
	}
	return st.Put([]byte(keyDesiredRef), seal(keyDesiredRef, ref))
}

// encodeCore is the core key's value: s without Desired and Owned, and
// without its Pending's plan.
func encodeCore(s State) ([]byte, error) {
	s.Desired, s.Owned = nil, nil
	if s.Pending != nil {
		p := *s.Pending
		p.Plan = nil
		s.Pending = &p
	}
	return Encode(s)
}

// The pending-plan key's value is the seq of a reconcile.started, 8 bytes
// big-endian, then the JSON of its plan (a step for every resource it
// changes). It is kept apart from the core so that the folds of the
// reconcile's outcomes, which read and write the core each time, do not
// carry it: otherwise every outcome's fold of a large reconcile would
// decode and rewrite the whole plan. A plan whose seq is not the core's Pending's (left by a version
// that kept plans in the core, one rolled back to) is not used, and the
// next fold drops it.
const pendingSeqSize = 8

// loadPendingPlan gives p, the core's Pending (nil when none), its plan
// from pending-plan, when that is p's. A plan the core holds itself
// (written before pending-plan) is kept.
func loadPendingPlan(r Reader, p *Pending) error {
	b, err := get(r, keyPendingPlan, true)
	if err != nil || b == nil {
		return err
	}
	if len(b) < pendingSeqSize {
		return fmt.Errorf("%w: %s: %d bytes, too short for its seq", ErrCorrupt, keyPendingPlan, len(b))
	}
	if p == nil || len(p.Plan) > 0 || binary.BigEndian.Uint64(b) != p.Seq {
		return nil
	}
	var plan []event.Step
	if err := json.Unmarshal(b[pendingSeqSize:], &plan); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, keyPendingPlan, err)
	}
	p.Plan = nilIfEmpty(plan)
	return nil
}

// putPendingPlan keeps s's pending plan when a fold gave it one (a
// reconcile.started folded, or a core that held it), and drops a kept plan
// that is no longer the pending reconcile's.
func putPendingPlan(st Store, s State) error {
	if s.Pending != nil && len(s.Pending.Plan) > 0 {
		plan, err := json.Marshal(s.Pending.Plan)
		if err != nil {
			return err
		}
		v := binary.BigEndian.AppendUint64(make([]byte, 0, pendingSeqSize+len(plan)), s.Pending.Seq)
		return st.Put([]byte(keyPendingPlan), seal(keyPendingPlan, append(v, plan...)))
	}
	kept := st.Get([]byte(keyPendingPlan))
	if kept == nil || (s.Pending != nil && len(kept) >= pendingSeqSize && binary.BigEndian.Uint64(kept) == s.Pending.Seq) {
		return nil
	}
	return st.Delete([]byte(keyPendingPlan))
}

// Stored keeps the journal's stored projection up to date: its Fold is the
// hook the journal calls inside each append transaction. The zero Stored is
// ready to use.
//
// Folding is local: a record about a resource changes only that resource's
// owned entry; a declaration replaces the desired state whole; everything
// else is the core. So Fold reads only the core and the owned entries the
// records name, never the whole projection: appending to the journal of a
// host that owns ten thousand resources costs what the records touch.
type Stored struct{}

// Fold folds recs into the projection in st, reading and writing only the
// keys they touch. The first record must follow the stored head and the
// rest follow it gap-free, else it returns ErrSequence and writes nothing.
func (p *Stored) Fold(st Store, recs []event.Record) error {
	if len(recs) == 0 {
		return nil
	}
	sealed, err := layout(st)
	if err == nil && !sealed {
		err = upgradeLayout(st)
	}
	if err != nil {
		return fmt.Errorf("fold %d records into the stored projection: %w", len(recs), err)
	}
	var s State
	core, err := get(st, keyCore, true)
	if err == nil && sealed && core == nil {
		err = errNoCore
	}
	if err != nil {
		return fmt.Errorf("fold %d records into the stored projection: %w", len(recs), err)
	}
	if len(core) > 0 {
		if err := json.Unmarshal(core, &s); err != nil {
			return fmt.Errorf("fold %d records into the stored projection: %w: core: %w", len(recs), ErrCorrupt, err)
		}
	}
	s.Desired, s.Owned = nil, nil
	next := s.Head
	for i := range recs {
		if next++; recs[i].Seq != next {
			return fmt.Errorf("fold into the projection at seq %d: %w: record %d is seq %d, want %d",
				s.Head, ErrSequence, i, recs[i].Seq, next)
		}
	}
	touched := make(map[string]struct{})
	declared, completed := false, false
	for _, r := range recs {
		if r.Resource != "" {
			touched[r.Resource] = struct{}{}
		}
		declared = declared || r.Kind == event.DeclarationReceived
		completed = completed || r.Kind == event.ReconcileCompleted
	}
	var ref *Desired
	if completed {
		// A completion may make the stored declaration the last good
		// one, which takes its revision, digest and seq: those alone are
		// read, not kept (the desired key is written only when a
		// declaration is received).
		d, err := loadDesiredRef(st, sealed)
		if err != nil {
			return fmt.Errorf("fold into the projection: %w", err)
		}
		s.Desired, ref = d, d
	}
	for id := range touched {
		v, err := get(st, prefixOwned+id, true)
		if err != nil {
			return fmt.Errorf("fold into the projection: %w", err)
		}
		if v == nil {
			continue
		}
		o, err := decodeOwned(v)
		if err != nil {
			return fmt.Errorf("fold into the projection: %w: owned %q: %w", ErrCorrupt, id, err)
		}
		if s.Owned == nil {
			s.Owned = make(map[string]Owned, len(touched))
		}
		s.Owned[id] = o
	}
	s = Replay(s, recs)

	// In key order: bbolt inserts each key into its node's sorted list,
	// and keys in random order (a map's) shift half of it each time.
	for _, id := range slices.Sorted(maps.Keys(touched)) {
		key := prefixOwned + id
		o, ok := s.Owned[id]
		if !ok {
			if err := st.Delete([]byte(key)); err != nil {
				return err
			}
			continue
		}
		if err := st.Put([]byte(key), seal(key, encodeOwned(o))); err != nil {
			return err
		}
	}
	// Written when a declaration replaced it: never the reference read
	// above (a declaration.received that does not decode leaves it).
	if declared && s.Desired != nil && s.Desired != ref {
		if err := putDesired(st, s.Desired); err != nil {
			return err
		}
	}
	if err := putPendingPlan(st, s); err != nil {
		return err
	}
	core, err = encodeCore(s)
	if err != nil {
		return err
	}
	return st.Put([]byte(keyCore), seal(keyCore, core))
}

// upgradeLayout rewrites a projection stored in layout 1 (or none yet) in
// layout 2: every value sealed, then the format. It runs inside the first
// append's transaction after an upgrade, once; values that do not decode
// are damage and are not sealed.
func upgradeLayout(st Store) error {
	if _, err := Load(st); err != nil {
		return err
	}
	type kv struct {
		k string
		v []byte
	}
	var all []kv
	err := st.ForEach(func(k, v []byte) error {
		if key := string(k); key == keyCore || key == keyDesired || strings.HasPrefix(key, prefixOwned) {
			all = append(all, kv{key, seal(key, v)}) // seal copies v
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, e := range all {
		if err := st.Put([]byte(e.k), e.v); err != nil {
			return err
		}
		if e.k == keyDesired {
			d, err := loadDesired(st, true)
			if err == nil {
				err = putDesiredRef(st, d, e.v)
			}
			if err != nil {
				return err
			}
		}
	}
	return st.Put([]byte(keyFormat), storedFormat)
}
