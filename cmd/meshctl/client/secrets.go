package client

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/sealing"
)

// ErrNoSealKey is returned when a node has not told its sealing key.
var ErrNoSealKey = errors.New("the node's sealing key is not known")

// sealFor returns d with every secret it only names sealed to node's
// sealing key: the values come from the store, and what leaves this
// process is the sealed form only. A secret already sealed (a stored
// declaration declared again with a release) is kept as it is. d itself
// is not changed.
func sealFor(s *authority.Secrets, ctx context.Context, keys jetstream.KeyValue, mesh, node string, d *declaration.Declaration) (*declaration.Declaration, error) {
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
		sealed, sender, err := s.Seal(value, nodeKey)
		if err != nil {
			return nil, fmt.Errorf("%s: secret %q: %w", what, sec.Name, err)
		}
		return &drivers.Secret{Name: sec.Name, Sealed: sealed, Sender: sender}, nil
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
	key, found, err := store.SealKey(ctx, keys, mesh, node)
	if err != nil {
		return "", fmt.Errorf("the sealing key of %s: %w", node, err)
	}
	if !found {
		return "", fmt.Errorf("%w: %w of %s: it was enrolled before secrets existed: enrol it again", ErrRefused, ErrNoSealKey, node)
	}
	if err := sealing.ValidPublicKey(key); err != nil {
		return "", fmt.Errorf("the sealing key of %s: %w", node, err)
	}
	return key, nil
}
