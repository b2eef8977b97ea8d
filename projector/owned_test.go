package projector

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/mesh-host/mesh-host/journal/event"
)

// The binary owned form reads back exactly what was written, and refuses
// what it did not write.
func TestOwnedRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := Owned{
			SpecDigest:  rapid.String().Draw(t, "digest"),
			LastOutcome: event.Action(rapid.SampledFrom([]string{"created", "updated", "unchanged", "failed", ""}).Draw(t, "outcome")),
			Seq:         rapid.Uint64().Draw(t, "seq"),
			Drifted:     rapid.Bool().Draw(t, "drifted"),
			Error:       rapid.String().Draw(t, "error"),
		}
		got, err := decodeOwned(encodeOwned(o))
		if err != nil || got != o {
			t.Fatalf("decodeOwned(encodeOwned(%+v)) = %+v, %v", o, got, err)
		}
	})
}

// TestOwnedFormat1: an entry written before the good revision was kept
// reads with none.
func TestOwnedFormat1(t *testing.T) {
	old := []byte{1, 7, 1, 9}
	old = append(old, "sha256:aa"...)
	old = append(old, 7)
	old = append(old, "created"...)
	old = append(old, 0)
	got, err := decodeOwned(old)
	want := Owned{SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 7, Drifted: true}
	if err != nil || got != want {
		t.Errorf("decodeOwned(format 1) = %+v, %v; want %+v", got, err, want)
	}
}

func TestOwnedRefusesMalformed(t *testing.T) {
	good := encodeOwned(Owned{SpecDigest: "sha256:aa", LastOutcome: event.ActionCreate, Seq: 7, Error: "x"})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"json":           []byte(`{"seq":7}`),
		"other format":   append([]byte{3}, good[1:]...),
		"format 1 body":  append([]byte{1}, good[1:]...),
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"unknown flag":   {2, 7, 0, 2, 0, 0, 0},
		"bad utf-8":      {2, 7, 0, 0, 1, 0xff, 0, 0},
	} {
		if _, err := decodeOwned(b); err == nil {
			t.Errorf("%s: decodeOwned(%x) accepted it", name, b)
		}
	}
}
