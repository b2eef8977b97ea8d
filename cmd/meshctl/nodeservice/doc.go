// Package nodeservice is the control service a mesh's nodes talk to: it
// keeps the streams and buckets in place (package store's table),
// answers each node's hello with its stored declaration and each sync
// with how much of its journal the events stream holds, signs what it
// answers, enrols nodes presenting a token, renews their credentials,
// and moves an events stream of the old layout. Several may serve one
// mesh against one cluster: it holds nothing another needs.
//
// It is not the operator's client (package client declares, plans and
// lists; this package only answers nodes) and not the command line: it
// is told its connection, keys and settings by package main, which runs
// it in a run group beside the rollout driver.
package nodeservice

import (
	"errors"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// Errors returned by this package: the reasons an enrolment or a renewal
// is refused, which the node is told.
var (
	// ErrTokenUsed is returned for an enrolment token redeemed before.
	ErrTokenUsed = errors.New("enrolment token already used")
	// ErrTokenRefused is returned for an enrolment token made before its
	// node was revoked or removed.
	ErrTokenRefused = errors.New("enrolment token refused")
	// ErrRevoked is returned for a node whose key is revoked, or that has
	// no credential on record.
	ErrRevoked = errors.New("credential revoked")
	// ErrNoBroker is returned when no broker address is known to
	// connect to. It is the authority's.
	ErrNoBroker = authority.ErrNoBroker
)
