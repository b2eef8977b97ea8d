// Package event is the persisted vocabulary of the host's journal: the Record
// envelope every entry shares, the Kind names, and one payload struct per kind.
//
// Everything here is written to disk and read back by other versions of the
// host, older and newer. So kinds are append-only: a Kind's string is never
// renamed or reused, a payload field is never repurposed, and a reader keeps
// and shows records whose kind it does not know (a rolled-back binary must
// read a journal that a newer one extended). It is not the place for logic
// about what records mean; that is package projector.
package event

import (
	"encoding/json"
	"errors"
	"time"
)

// Errors returned by this package.
var (
	// ErrCorrupt is returned when stored bytes do not decode as a record:
	// bad checksum, truncated field, sequence that disagrees with its key.
	ErrCorrupt = errors.New("corrupt record")
	// ErrUnknownKind is returned by DecodePayload for a kind this binary does
	// not know. The record itself is still valid and must be kept.
	ErrUnknownKind = errors.New("unknown record kind")
)

// Record is one journal entry. Seq and Time are assigned by the journal when
// it is appended; the other fields are the caller's.
type Record struct {
	// Seq numbers records gap-free from 1.
	Seq uint64 `json:"seq"`
	// Time is when the journal appended the record.
	Time time.Time `json:"time"`
	Kind Kind      `json:"kind"`
	// Cause is the Seq of the record that led to this one; 0 for none. An
	// outcome's cause is its reconcile, a reconcile's its declaration or drift.
	Cause uint64 `json:"cause,omitempty"`
	// Resource names the managed resource the record is about ("file:/etc/x"),
	// empty for records about the host as a whole. The journal indexes it.
	Resource string `json:"resource,omitempty"`
	// Payload is the kind's payload struct as JSON.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// New builds a record of kind k with payload p encoded as JSON. It panics if
// p cannot be encoded, which for this package's payload types is a bug.
func New(k Kind, cause uint64, resource string, p any) Record {
	b, err := json.Marshal(p)
	if err != nil {
		panic("event: payload of " + string(k) + " does not encode: " + err.Error())
	}
	return Record{Kind: k, Cause: cause, Resource: resource, Payload: b}
}

// DecodePayload returns the typed payload of r: a pointer to the struct that
// Kind names. For a kind this binary does not know it returns ErrUnknownKind.
func (r Record) DecodePayload() (any, error) {
	mk, ok := payloads[r.Kind]
	if !ok {
		return nil, ErrUnknownKind
	}
	p := mk()
	if len(r.Payload) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(r.Payload, p); err != nil {
		return nil, errors.Join(ErrCorrupt, err)
	}
	return p, nil
}
