// Package client is the operator's client of a mesh: the operations
// `meshctl` runs against the cluster as the control user (declare,
// release, plan, nodes, journal and why, labels, profiles, known and
// remove, report, replay and verify, revoke, rollouts), and the rollout
// driver, which moves rollouts on by doing what an operator does (render,
// declare, push) under the rollout's name, as one actor of a control
// service's run group.
//
// Everything it reads and writes is in JetStream (package store owns the
// buckets and streams) or in the authority's data directory (package
// authority); it keeps nothing another client needs.
//
// It is not the service the nodes talk to (package nodeservice), not the
// printing of what it reads (package fleetview), not the wire protocol
// (package linkproto) and not the command line (package main reads the
// flags, decides defaults and wires the run group; this package is told).
package client

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
	// ErrNoRecord is returned when the events stream holds no record that
	// a question needs.
	ErrNoRecord = errors.New("no such record")
	// ErrNothingDeclared is returned by NextStored for a node with no
	// desired state stored: there is nothing to plan from.
	ErrNothingDeclared = errors.New("nothing declared")
)
