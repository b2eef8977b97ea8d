// Package control is the control plane of a mesh: the authority that signs
// every credential (operator, accounts, the control user, one user per
// node), the embedded NATS broker, the control service that answers the
// nodes' hellos, and the operations an operator runs (declare, plan,
// nodes, journal).
//
// Everything durable lives in JetStream (the desired state of each node in
// a KV bucket, every node's journal and last heartbeat in streams) or in
// the authority's data directory. A Service keeps nothing in memory that
// another needs, so several may serve one mesh against one cluster.
//
// It is not the wire protocol (package linkproto owns every subject and
// message) and not the command line (package main reads the flags and
// decides defaults; this package is told).
package control

import (
	"errors"
	"fmt"
)

// Errors returned by this package. Package main turns the refusals into
// exit code 2 and the rest into 1.
var (
	// ErrNoAuthority is returned when the data directory holds no
	// authority: `meshctl init` (or `serve`) has not run there.
	ErrNoAuthority = errors.New("no authority in the data directory")
	// ErrMeshMismatch is returned when an existing authority is asked to
	// be created again for another mesh.
	ErrMeshMismatch = errors.New("the authority serves another mesh")
	// ErrNoCA is returned when the authority has no certificate
	// authority yet (it was created before the broker served TLS).
	ErrNoCA = errors.New("the authority has no certificate authority")
	// ErrNoCAKey is returned when a certificate is to be issued by an
	// adopted CA whose key the authority does not hold.
	ErrNoCAKey = errors.New("the mesh's CA key is not held")
	// ErrCAMismatch is returned when an authority with a CA is asked to
	// adopt another: every node trusts the one it has.
	ErrCAMismatch = errors.New("the authority has another CA")
	// ErrNoBroker is returned when no broker address is known: neither
	// given nor recorded by a running `meshctl serve`.
	ErrNoBroker = errors.New("no broker address")
	// ErrRefused is returned for what the control plane refuses to do:
	// a label, profile, rollout or release it will not take, a question
	// it cannot answer as asked. A refused declaration is
	// ErrDeclarationRefused, which is ErrRefused too.
	ErrRefused = errors.New("refused")
	// ErrDeclarationRefused is returned for a declaration the control
	// plane or the node refuses: wrong mesh or node, an older revision, a
	// reused revision, too large, one no profile renders, or the node's
	// own refusal.
	ErrDeclarationRefused = fmt.Errorf("declaration %w", ErrRefused)
	// ErrNotApplied is returned by Declare when the node accepted a
	// declaration but did not report applying it in time, or reported a
	// failed apply.
	ErrNotApplied = errors.New("declaration not applied")
	// ErrApplyFailed is returned by Declare when the node reports that
	// applying the declaration failed.
	ErrApplyFailed = errors.New("apply failed")
	// ErrRolledBack is returned by Release when the node's launcher rolled
	// the release back: it did not start there.
	ErrRolledBack = errors.New("release rolled back")
	// ErrTokenUsed is returned for an enrolment token redeemed before.
	ErrTokenUsed = errors.New("enrolment token already used")
	// ErrTokenRefused is returned for an enrolment token made before its
	// node was revoked or removed.
	ErrTokenRefused = errors.New("enrolment token refused")
	// ErrRevoked is returned for a node whose key is revoked, or that has
	// no credential on record.
	ErrRevoked = errors.New("credential revoked")
	// ErrNoRecord is returned when the events stream holds no record that
	// a question needs.
	ErrNoRecord = errors.New("no such record")
	// ErrNothingDeclared is returned by NextStored for a node with no
	// desired state stored: there is nothing to plan from.
	ErrNothingDeclared = errors.New("nothing declared")
	// ErrNotPlanned is returned by a fleet's plan when a node did not
	// answer with a plan: offline, refused, busy, or failed.
	ErrNotPlanned = errors.New("not every node planned")
)
