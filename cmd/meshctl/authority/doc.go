// Package authority is the mesh's authority as its data directory holds
// it: the operator, account and signing keys and the credentials they
// sign (the control user, one user per node, enrolment tokens), the
// certificate authority, the declaration and sealing keys, control.json,
// the store of secret values, and the store of host releases with the
// HTTP handler that serves them.
//
// It is files and keys only. It speaks to no broker (it imports no NATS
// client or server): pushing an account to a running broker, sealing a
// secret for a node whose key is in a bucket, and everything else that
// needs JetStream is the NATS side's, which is told an *Authority.
package authority

import (
	"errors"
)

// Errors returned by this package.
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
	// ErrNoSecret is returned for a secret the store does not hold.
	ErrNoSecret = errors.New("no such secret")
	// ErrRefused is returned for what the control plane refuses to do.
	// Here: a file that is not a host release. It is the one refusal of
	// the whole control plane (the NATS side returns it too), which
	// package main turns into exit code 2.
	ErrRefused = errors.New("refused")
)
