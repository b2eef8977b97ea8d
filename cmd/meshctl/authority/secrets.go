package authority

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/sealing"
)

// Files of the secrets: the mesh's sealing key, and the store.
const (
	sealingSeedFile = "sealing.xk"
	secretsDir      = "secrets"
	secretSuffix    = ".sealed"
)

var secretName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// sealingKey reads the mesh's sealing key from dir, making it on first use
// (an authority made before secrets existed gains it then).
func sealingKey(dir string) (nkeys.KeyPair, error) {
	return keyFile(dir, sealingSeedFile, sealing.NewKey, sealing.KeyFromSeed)
}

// Secrets is the control plane's store of secret values: one file each in
// DATA/secrets, readable by its owner only, each value sealed to the
// mesh's own sealing key, so that it is encrypted at rest and a copy of
// the directory without the key holds nothing readable.
type Secrets struct {
	dir string
	key nkeys.KeyPair
	pub string
}

// Secrets returns the authority's secret store.
func (a *Authority) Secrets() (*Secrets, error) {
	k, err := sealingKey(a.Dir)
	if err != nil {
		return nil, err
	}
	pub, _ := k.PublicKey()
	return &Secrets{dir: filepath.Join(a.Dir, secretsDir), key: k, pub: pub}, nil
}

func (s *Secrets) path(name string) (string, error) {
	if !secretName.MatchString(name) {
		return "", fmt.Errorf("%q is not a secret's name: lower-case letters, digits, '.', '-' and '_', at most 63", name)
	}
	return filepath.Join(s.dir, name+secretSuffix), nil
}

// Set stores value as name, replacing what it held.
func (s *Secrets) Set(name string, value []byte) error {
	path, err := s.path(name)
	if err != nil {
		return err
	}
	sealed, err := sealing.Seal(value, s.pub, s.key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	return writeFile(path, []byte(sealed+"\n"))
}

// Get returns the value of name.
func (s *Secrets) Get(name string) ([]byte, error) {
	path, err := s.path(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q (set it with `meshctl secret set %s`)", ErrNoSecret, name, name)
	}
	if err != nil {
		return nil, err
	}
	value, err := sealing.Open(strings.TrimSpace(string(b)), s.pub, s.key)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	return value, nil
}

// Remove removes name.
func (s *Secrets) Remove(name string) error {
	path, err := s.path(name)
	if err != nil {
		return err
	}
	if err := os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %q", ErrNoSecret, name)
	} else if err != nil {
		return err
	}
	return nil
}

// List returns the names the store holds, sorted.
func (s *Secrets) List() ([]string, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), secretSuffix); ok && secretName.MatchString(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Seal seals value to a node's sealing key nodeKey, as from the mesh's
// own key: sender is that key's public half, which the node opens it with.
func (s *Secrets) Seal(value []byte, nodeKey string) (sealed, sender string, err error) {
	sealed, err = sealing.Seal(value, nodeKey, s.key)
	return sealed, s.pub, err
}
