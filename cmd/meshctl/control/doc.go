// Package control is the control plane of a mesh on NATS: the control
// service that answers the nodes' hellos, and the operations an operator
// runs (declare, plan, nodes, journal). It is told the authority that
// signs every credential (package authority) and a connection to a
// broker (package broker embeds one); the buckets and streams are package
// store's, and printing what it reads for a person is package
// fleetview's.
//
// Everything durable lives in JetStream (the desired state of each node in
// a KV bucket, every node's journal and last heartbeat in streams) or in
// the authority's data directory. A Service keeps nothing in memory that
// another needs, so several may serve one mesh against one cluster.
//
// It is not the wire protocol (package linkproto owns every subject and
// message) and not the command line (package main reads the flags,
// decides defaults and wires the service's run group; this package is
// told).
package control

import (
	"errors"
	"fmt"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// Errors returned by this package. Package main turns the refusals into
// exit code 2 and the rest into 1.
var (
	// ErrNoBroker is returned when no broker address is known: neither
	// given nor recorded by a running `meshctl serve`. It is the
	// authority's, which issues tokens naming the broker.
	ErrNoBroker = authority.ErrNoBroker
	// ErrRefused is returned for what the control plane refuses to do:
	// a label, profile, rollout or release it will not take, a question
	// it cannot answer as asked. A refused declaration is
	// ErrDeclarationRefused, which is ErrRefused too.
	// It is the authority's: one refusal for the whole control plane.
	ErrRefused = authority.ErrRefused
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
)
