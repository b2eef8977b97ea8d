package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/internal/atomicfile"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/sealing"
)

// sealKeyFile is the node's sealing key in the state directory: what the
// control plane seals secrets to. Born here, it never leaves the machine.
const sealKeyFile = "seal.xk"

// ensureSealKey returns the node's sealing key, making it on first use.
func ensureSealKey(dir string) (nkeys.KeyPair, error) {
	path := filepath.Join(dir, sealKeyFile)
	k, err := readSealKey(dir)
	if !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	if k, err = sealing.NewKey(); err != nil {
		return nil, err
	}
	seed, err := k.Seed()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := atomicfile.Write(path, append(seed, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("write the node's sealing key: %w", err)
	}
	return k, nil
}

// readSealKey reads the node's sealing key; an error wrapping
// fs.ErrNotExist means it has none yet.
func readSealKey(dir string) (nkeys.KeyPair, error) {
	path := filepath.Join(dir, sealKeyFile)
	if err := enrolment.CheckCreds(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", path, fs.ErrNotExist)
		}
		return nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := sealing.KeyFromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// errNotSealed refuses a declaration naming a secret that is not sealed:
// only the control plane, which holds the values, can declare one.
var errNotSealed = errors.New("a secret is not sealed to this node")

// sealedSecrets lists the fields of specs that hold a secret, refusing any
// not sealed.
func sealedSecrets(specs []drivers.Spec) ([]drivers.SecretField, error) {
	var out []drivers.SecretField
	for _, s := range specs {
		for _, f := range drivers.SecretFields(s) {
			sec := *f.Secret
			if sec == nil {
				continue
			}
			if sec.Sealed == "" {
				return nil, fmt.Errorf("%s: %w: secret %q is only named; declare it with `meshctl declare`, which seals its value to the node", f.What, errNotSealed, sec.Name)
			}
			out = append(out, f)
		}
	}
	return out, nil
}

// openSecrets opens, in memory, every secret specs name, with the node's
// sealing key, and gives each spec (specs are a declaration's Expanded
// copies) its own opened copy: the value is held by nothing that is encoded
// or kept. A secret that does not open refuses the whole: a half-opened
// declaration is never applied.
func (e *env) openSecrets(specs []drivers.Spec) error {
	return e.eachSecret(specs, func(f drivers.SecretField, value, digestKey []byte) {
		e.redactor().add(value)
		opened := **f.Secret
		opened.Provide(value, digestKey)
		*f.Secret = &opened
	})
}

// checkSecrets is admission's look at the secrets specs name: each is
// sealed to this node and opens. Nothing is kept or changed, so it reads a
// declaration's own resources, with no copy on the push's path.
func (e *env) checkSecrets(specs []drivers.Spec) error {
	return e.eachSecret(specs, func(drivers.SecretField, []byte, []byte) {})
}

// eachSecret opens every secret specs name and hands each to use; a
// declaration naming none costs one pass over its resources.
func (e *env) eachSecret(specs []drivers.Spec, use func(f drivers.SecretField, value, digestKey []byte)) error {
	fields, err := sealedSecrets(specs)
	if err != nil || len(fields) == 0 {
		return err
	}
	key, err := readSealKey(e.stateDir())
	if err != nil {
		return fmt.Errorf("the declaration names secrets, and this node's sealing key cannot be read: %w", err)
	}
	digestKey, err := sealing.DigestKey(key)
	if err != nil {
		return err
	}
	for _, f := range fields {
		sec := *f.Secret
		value, err := sealing.Open(sec.Sealed, sec.Sender, key)
		if err != nil {
			return fmt.Errorf("%s: secret %q: %w", f.What, sec.Name, err)
		}
		use(f, value, digestKey)
	}
	return nil
}
