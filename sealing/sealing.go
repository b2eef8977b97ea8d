// Package sealing seals a secret to one node and opens it there: the
// control plane seals each value a declaration names with the mesh's
// sealing key to the node's own sealing key (curve25519 nkeys, nacl box:
// the NATS ecosystem's own "xkeys"), and only that node can open it. What
// is kept anywhere (the desired-state bucket, the node's journal, the
// events stream) is the sealed form. It imports nothing of the module.
package sealing

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"

	"github.com/nats-io/nkeys"
)

// MaxValue bounds a secret's value: a password, a key or a certificate,
// not a payload.
const MaxValue = 64 << 10

// Errors of sealing and opening.
var (
	// ErrTooLarge is returned for a value over MaxValue.
	ErrTooLarge = errors.New("secret too large")
	// ErrNotSealedHere is returned when a sealed value does not open with
	// this key: it was sealed to another node, by another sender, or
	// changed.
	ErrNotSealedHere = errors.New("the secret does not open with this node's key")
)

// NewKey makes a sealing key: a node's, or the mesh's.
func NewKey() (nkeys.KeyPair, error) { return nkeys.CreateCurveKeys() }

// KeyFromSeed reads a sealing key's seed, refusing any other kind of key.
func KeyFromSeed(seed []byte) (nkeys.KeyPair, error) {
	kp, err := nkeys.FromCurveSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("not a sealing key seed: %w", err)
	}
	return kp, nil
}

// ValidPublicKey reports whether pub is the public half of a sealing key.
func ValidPublicKey(pub string) error {
	if !nkeys.IsValidPublicCurveKey(pub) {
		return fmt.Errorf("%q is not a public sealing key (an nkey starting with X)", pub)
	}
	return nil
}

// Seal seals value with from (the mesh's key) so that only the holder of
// to (a node's public key) can open it, and returns it as base64url.
func Seal(value []byte, to string, from nkeys.KeyPair) (string, error) {
	if len(value) > MaxValue {
		return "", fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(value), MaxValue)
	}
	if err := ValidPublicKey(to); err != nil {
		return "", err
	}
	box, err := from.Seal(value, to)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(box), nil
}

// Open opens what Seal sealed, with the node's key, checking that sender
// sealed it.
func Open(sealed, sender string, with nkeys.KeyPair) ([]byte, error) {
	box, err := base64.RawURLEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSealedHere, err)
	}
	if err := ValidPublicKey(sender); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotSealedHere, err)
	}
	value, err := with.Open(box, sender)
	if err != nil {
		return nil, fmt.Errorf("%w (sealed to another node, or changed)", ErrNotSealedHere)
	}
	return value, nil
}

// DigestKey is the key of the keyed digests a node reports its secret
// files' content by: derived from its sealing key's seed, so it is the
// same across restarts, is never stored, and is known to no one else. A
// plain digest of a secret would let anyone holding the record test
// guesses of a low-entropy value; a keyed one does not.
func DigestKey(k nkeys.KeyPair) ([]byte, error) {
	seed, err := k.Seed()
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, seed)
	m.Write([]byte("mesh-host secret digest key 1"))
	return m.Sum(nil), nil
}
