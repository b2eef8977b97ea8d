package projector

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Errors returned by this package.
var (
	// ErrCorrupt is returned by Decode, Load, LoadDesired and Stored.Fold
	// when stored bytes are not an encoded State, or fail their checksum.
	ErrCorrupt = errors.New("corrupt projection")
	// ErrSequence is returned by Stored.Fold when a record's seq does not
	// follow the head of the projection it is folded into: a record would
	// be folded twice, or one left out.
	ErrSequence = errors.New("record out of sequence")
)

// Encode returns s as JSON. The encoding is canonical: States that are Equal
// encode to the same bytes, which is what lets Stored recognise its own
// output. It fails only for a time outside years 0 to 9999.
func Encode(s State) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode projection at seq %d: %w", s.Head, err)
	}
	return b, nil
}

// Decode parses what Encode returned. Empty input is the zero State, which is
// what the journal holds before its first record. Fields it does not know are
// ignored.
func Decode(b []byte) (State, error) {
	var s State
	if len(b) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	s.normalise()
	return s, nil
}

// normalise puts a decoded State in the form Fold produces, so that Equal
// need not look through representation: empty collections are nil and times
// are UTC.
func (s *State) normalise() {
	if len(s.Owned) == 0 {
		s.Owned = nil
	}
	s.Versions = nilIfEmpty(s.Versions)
	s.Bad = nilIfEmpty(s.Bad)
	if f := s.Facts; f != nil {
		f.Addresses = nilIfEmpty(f.Addresses)
	}
	if len(s.Failing) == 0 {
		s.Failing = nil
	}
	if len(s.Skipped) == 0 {
		s.Skipped = nil
	}
	if len(s.IDs) == 0 {
		s.IDs = nil
	}
	if len(s.Made) == 0 {
		s.Made = nil
	}
	if len(s.Refreshes) == 0 {
		s.Refreshes = nil
	}
	for id, o := range s.Refreshes {
		o.Since = o.Since.UTC()
		s.Refreshes[id] = o
	}
	if g := s.LastGood; g != nil {
		g.At = g.At.UTC()
	}
	if d := s.Desired; d != nil {
		d.Resources = nilIfEmpty(d.Resources)
		d.Document = nilIfEmpty(d.Document)
	}
	if p := s.Pending; p != nil {
		p.Plan = nilIfEmpty(p.Plan)
	}
	if r := s.LastReconcile; r != nil {
		r.Started, r.Completed = r.Started.UTC(), r.Completed.UTC()
	}
	if r := s.Running; r != nil {
		r.Since = r.Since.UTC()
	}
	s.Link.Since = s.Link.Since.UTC()
}
