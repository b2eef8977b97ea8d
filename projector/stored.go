package projector

import (
	"encoding/json"
	"fmt"
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
//	core            the State without Desired and Owned, as JSON
//	desired         the Desired, as JSON (absent before the first declaration)
//	owned/<id>      one Owned, in the binary form of owned.go
const (
	keyCore     = "core"
	keyDesired  = "desired"
	prefixOwned = "owned/"
)

// Load reads the State stored by Stored.Fold. An empty store is the zero
// State, which is what the journal holds before its first record.
func Load(r Reader) (State, error) {
	var s State
	if core := r.Get([]byte(keyCore)); len(core) > 0 {
		if err := json.Unmarshal(core, &s); err != nil {
			return State{}, fmt.Errorf("%w: core: %w", ErrCorrupt, err)
		}
	}
	s.Desired, s.Owned = nil, nil
	if d := r.Get([]byte(keyDesired)); len(d) > 0 {
		s.Desired = new(Desired)
		if err := json.Unmarshal(d, s.Desired); err != nil {
			return State{}, fmt.Errorf("%w: desired: %w", ErrCorrupt, err)
		}
	}
	err := r.ForEach(func(k, v []byte) error {
		id, ok := strings.CutPrefix(string(k), prefixOwned)
		if !ok {
			return nil
		}
		o, err := decodeOwned(v)
		if err != nil {
			return fmt.Errorf("%w: owned %q: %w", ErrCorrupt, id, err)
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

// LoadDesired reads only the Desired part of the State stored by
// Stored.Fold (nil before the first declaration): what admitting a new
// declaration needs, without decoding every owned resource.
func LoadDesired(r Reader) (*Desired, error) {
	b := r.Get([]byte(keyDesired))
	if len(b) == 0 {
		return nil, nil
	}
	d := new(Desired)
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("%w: desired: %w", ErrCorrupt, err)
	}
	return d, nil
}

// encodeCore is the core key's value: s without Desired and Owned.
func encodeCore(s State) ([]byte, error) {
	s.Desired, s.Owned = nil, nil
	return Encode(s)
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
	var s State
	if core := st.Get([]byte(keyCore)); len(core) > 0 {
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
	declared := false
	for _, r := range recs {
		if r.Resource != "" {
			touched[r.Resource] = struct{}{}
		}
		declared = declared || r.Kind == event.DeclarationReceived
	}
	for id := range touched {
		v := st.Get([]byte(prefixOwned + id))
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

	for id := range touched {
		key := []byte(prefixOwned + id)
		o, ok := s.Owned[id]
		if !ok {
			if err := st.Delete(key); err != nil {
				return err
			}
			continue
		}
		if err := st.Put(key, encodeOwned(o)); err != nil {
			return err
		}
	}
	if declared && s.Desired != nil {
		b, err := json.Marshal(s.Desired)
		if err != nil {
			return err
		}
		if err := st.Put([]byte(keyDesired), b); err != nil {
			return err
		}
	}
	core, err := encodeCore(s)
	if err != nil {
		return err
	}
	return st.Put([]byte(keyCore), core)
}
