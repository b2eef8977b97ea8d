package control

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/sealing"
)

// Files of the secrets: the mesh's sealing key, and the store.
const (
	sealingSeedFile = "sealing.xk"
	secretsDir      = "secrets"
	secretSuffix    = ".sealed"
)

// Errors of the secrets.
var (
	// ErrNoSecret is returned for a secret the store does not hold.
	ErrNoSecret = errors.New("no such secret")
	// ErrNoSealKey is returned when a node has not told its sealing key.
	ErrNoSealKey = errors.New("the node's sealing key is not known")
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

// sealFor returns d with every secret it only names sealed to node's
// sealing key: the values come from the store, and what leaves this
// process is the sealed form only. A secret already sealed (a stored
// declaration declared again with a release) is kept as it is. d itself
// is not changed.
func (s *Secrets) sealFor(ctx context.Context, keys jetstream.KeyValue, mesh, node string, d *declaration.Declaration) (*declaration.Declaration, error) {
	var nodeKey string
	return replaceSecrets(d, func(what string, sec *drivers.Secret) (*drivers.Secret, error) {
		if sec.Sealed != "" {
			return sec, nil
		}
		if nodeKey == "" {
			var err error
			if nodeKey, err = nodeSealKey(ctx, keys, mesh, node); err != nil {
				return nil, err
			}
		}
		value, err := s.Get(sec.Name)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrRefused, what, err)
		}
		sealed, err := sealing.Seal(value, nodeKey, s.key)
		if err != nil {
			return nil, fmt.Errorf("%s: secret %q: %w", what, sec.Name, err)
		}
		return &drivers.Secret{Name: sec.Name, Sealed: sealed, Sender: s.pub}, nil
	})
}

// withoutSealed is d with its secrets named only: what an operator
// declared, whatever the sealing. Two declarations that differ only by
// being sealed again are the same declaration.
func withoutSealed(d *declaration.Declaration) *declaration.Declaration {
	out, _ := replaceSecrets(d, func(_ string, sec *drivers.Secret) (*drivers.Secret, error) {
		return &drivers.Secret{Name: sec.Name}, nil
	})
	return out
}

// replaceSecrets returns a copy of d in which each resource naming a
// secret is a copy with each secret replaced by what with gives for it;
// d itself is not changed.
func replaceSecrets(d *declaration.Declaration, with func(what string, sec *drivers.Secret) (*drivers.Secret, error)) (*declaration.Declaration, error) {
	out := *d
	out.Resources = slices.Clone(d.Resources)
	for i, r := range out.Resources {
		if !drivers.NamesSecret(r) {
			continue
		}
		c := shallowCopy(r)
		for _, f := range drivers.SecretFields(c) {
			if *f.Secret == nil {
				continue
			}
			sec, err := with(f.What, *f.Secret)
			if err != nil {
				return nil, err
			}
			*f.Secret = sec
		}
		out.Resources[i] = c
	}
	return &out, nil
}

// shallowCopy copies the spec struct s points at: its secret fields can
// then be set without touching s.
func shallowCopy(s drivers.Spec) drivers.Spec {
	v := reflect.ValueOf(s).Elem()
	c := reflect.New(v.Type())
	c.Elem().Set(v)
	return c.Interface().(drivers.Spec)
}

// nodeSealKey is the sealing key node told when it enrolled.
func nodeSealKey(ctx context.Context, keys jetstream.KeyValue, mesh, node string) (string, error) {
	e, err := keys.Get(ctx, linkproto.DesiredKey(mesh, node))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", fmt.Errorf("%w: %w of %s: it was enrolled before secrets existed: enrol it again", ErrRefused, ErrNoSealKey, node)
	}
	if err != nil {
		return "", fmt.Errorf("the sealing key of %s: %w", node, err)
	}
	key := string(e.Value())
	if err := sealing.ValidPublicKey(key); err != nil {
		return "", fmt.Errorf("the sealing key of %s: %w", node, err)
	}
	return key, nil
}
