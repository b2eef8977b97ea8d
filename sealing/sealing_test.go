package sealing_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/sealing"
)

func TestSealOpensOnlyForItsNode(t *testing.T) {
	mesh, _ := sealing.NewKey()
	meshPub, _ := mesh.PublicKey()
	node, _ := sealing.NewKey()
	nodePub, _ := node.PublicKey()
	other, _ := sealing.NewKey()
	otherPub, _ := other.PublicKey()

	value := []byte("hunter2")
	box, err := sealing.Seal(value, nodePub, mesh)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(box, "hunter2") {
		t.Fatal("the sealed form holds the value")
	}
	got, err := sealing.Open(box, meshPub, node)
	if err != nil || !bytes.Equal(got, value) {
		t.Fatalf("Open = %q, %v", got, err)
	}
	again, _ := sealing.Seal(value, nodePub, mesh)
	if again == box {
		t.Error("sealing twice gives the same bytes: equal values would be told apart by their sealed form")
	}
	for name, open := range map[string]func() ([]byte, error){
		"another node":   func() ([]byte, error) { return sealing.Open(box, meshPub, other) },
		"another sender": func() ([]byte, error) { return sealing.Open(box, otherPub, node) },
		"a flipped byte": func() ([]byte, error) {
			b := []byte(box)
			b[len(b)/2] ^= 1
			if b[len(b)/2] == '-'^1 || b[len(b)/2] == '_'^1 {
				b[len(b)/2] = 'A'
			}
			return sealing.Open(string(b), meshPub, node)
		},
		"not base64": func() ([]byte, error) { return sealing.Open("!!", meshPub, node) },
	} {
		if v, err := open(); !errors.Is(err, sealing.ErrNotSealedHere) {
			t.Errorf("%s: Open = %q, %v", name, v, err)
		}
	}
	if _, err := sealing.Seal(make([]byte, sealing.MaxValue+1), nodePub, mesh); !errors.Is(err, sealing.ErrTooLarge) {
		t.Errorf("an oversized value: %v", err)
	}
	if _, err := sealing.Seal(value, meshPub[:10], mesh); err == nil {
		t.Error("sealed to a key that is not one")
	}
}

func TestDigestKeyIsStableAndPerNode(t *testing.T) {
	a, _ := sealing.NewKey()
	b, _ := sealing.NewKey()
	seed, _ := a.Seed()
	a2, err := sealing.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	ka, _ := sealing.DigestKey(a)
	ka2, _ := sealing.DigestKey(a2)
	kb, _ := sealing.DigestKey(b)
	if !bytes.Equal(ka, ka2) || bytes.Equal(ka, kb) || len(ka) != 32 {
		t.Errorf("digest keys: %x %x %x", ka, ka2, kb)
	}
	if _, err := sealing.KeyFromSeed([]byte("SUAPLACEHOLDER")); err == nil {
		t.Error("a non-curve seed was taken")
	}
}
