// Package store owns the control plane's JetStream buckets and streams:
// one table of every bucket and stream with its settings (Ensure makes
// them, so their settings are written once), their lookup by the
// operator's commands with the advice to start `meshctl serve` when one
// is missing, a reader of streams in batches (Puller), and the records
// both the control service and the operator's client read or write: the
// desired state (Desired, its older stored form included), the node
// credentials, the sealing keys, the labels, the profiles, the rollouts
// with the active-rollout slot, and the bad releases.
//
// It is not the wire protocol (package linkproto names every bucket,
// stream, key and message) and it holds nothing in memory that another
// process needs: every control service and command reads the cluster.
// The tokens bucket's use records are the control service's alone, and
// only their key and the refusal record are here.
package store

import "errors"

// Errors returned by this package.
var (
	// ErrUndecodable is returned for a stored record that does not
	// decode: damage, or a writer that does not follow its owner here.
	ErrUndecodable = errors.New("record does not decode")
	// ErrBadPresence is returned by Presences.Record for a record it
	// would not store: no valid node, no time, a text over
	// MaxPresenceText.
	ErrBadPresence = errors.New("bad presence record")
)
