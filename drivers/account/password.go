package account

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"regexp"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
)

// cryptRE is a crypt(3) hash in the modular form every current scheme
// writes: "$id$", then parameters, salt and hash in crypt's alphabet
// (yescrypt "$y$...", SHA-512 "$6$rounds=...$...", bcrypt "$2b$...",
// argon2 "$argon2id$v=19$m=...,t=...,p=...$..."). It leaves out a
// colon and a newline, which would break the line, and a clear-text
// password, which is not a hash.
var cryptRE = regexp.MustCompile(`^\$[0-9a-z]{1,16}\$[A-Za-z0-9./=,+$-]{1,1000}$`)

// lockedHash is the hash field of an account no password opens, as
// useradd and groupadd write it.
const lockedHash = "!"

// password is what a user spec asks of its shadow hash field.
type password struct {
	// declared is whether the spec gives a hash; without one the account
	// is locked.
	declared bool
	hash     string
	// key is the secret's digest key, which Seen is keyed with.
	key []byte
}

// passwordOf opens the spec's password. Its errors name the secret,
// never its value.
func passwordOf(s *drivers.UserSpec) (password, error) {
	sec := s.Password
	if sec == nil {
		return password{}, nil
	}
	value, key, ok := sec.Opened()
	switch {
	case !ok:
		return password{}, fmt.Errorf("user %s: %w: password secret %q was not opened for this node", s.Name, drivers.ErrInvalidSpec, sec.Name)
	case len(key) == 0:
		return password{}, fmt.Errorf("user %s: %w: password secret %q has no digest key", s.Name, drivers.ErrInvalidSpec, sec.Name)
	case !cryptRE.Match(value):
		return password{}, fmt.Errorf("user %s: %w: password secret %q is not a crypt(3) hash (\"$id$salt$hash\", as mkpasswd prints one)", s.Name, drivers.ErrInvalidSpec, sec.Name)
	}
	return password{declared: true, hash: string(value), key: key}, nil
}

// locked reports whether a hash field lets no password in: it starts
// with "!" (usermod -L, passwd -l, useradd's default) or "*" (an
// account never meant to log in). An empty field is not locked: it lets
// anyone in without a password.
func locked(field string) bool {
	return strings.HasPrefix(field, "!") || strings.HasPrefix(field, "*")
}

// holds reports whether the hash field found is what p asks.
func (p password) holds(found string) bool {
	if p.declared {
		return found == p.hash
	}
	return locked(found)
}

// field is the hash field p asks for in place of found: the declared
// hash, or found locked as usermod -L locks it, so that unlocking gives
// the password back.
func (p password) field(found string) string {
	switch {
	case p.declared:
		return p.hash
	case locked(found):
		return found
	}
	return "!" + found
}

// digest is what Seen is made of: keyed with the password's digest key
// when the spec declares one, so that a drift record holds nothing that
// a guess of the password can be tested against.
type digest struct {
	h      hash.Hash
	prefix string
	keyed  bool
}

func newDigest(key []byte) *digest {
	if key != nil {
		return &digest{h: hmac.New(sha256.New, key), prefix: "hmac-sha256:", keyed: true}
	}
	return &digest{h: sha256.New(), prefix: "sha256:"}
}

// add adds a named value.
func (d *digest) add(name, value string) {
	io.WriteString(d.h, name+"="+value+"\n")
}

// addHash adds a hash field: the field itself only to a keyed digest,
// else only whether it is locked, empty or set.
func (d *digest) addHash(name, field string) {
	switch {
	case d.keyed:
	case locked(field):
		field = "(locked)"
	case field == "":
		field = "(empty)"
	case field == "x":
		// passwd's "see shadow", no hash.
	default:
		field = "(set)"
	}
	d.add(name, field)
}

func (d *digest) String() string { return d.prefix + hex.EncodeToString(d.h.Sum(nil)) }
