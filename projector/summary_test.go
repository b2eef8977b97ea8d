package projector

import (
	"bytes"
	"errors"
	"maps"
	"testing"
)

// TestLoadSummary: LoadSummary is LoadCore with a Desired of revision,
// digest and seq alone, and damage to what it reads is ErrCorrupt.
func TestLoadSummary(t *testing.T) {
	_, st := storedSample(t)
	core, err := LoadCore(st)
	if err != nil {
		t.Fatal(err)
	}
	got, err := LoadSummary(st)
	if err != nil {
		t.Fatal(err)
	}
	want := core.Clone()
	want.Desired = &Desired{Revision: core.Desired.Revision, Digest: core.Desired.Digest, Seq: core.Desired.Seq}
	if !Equal(got, want) {
		t.Errorf("LoadSummary differs from LoadCore but for the declaration's resources: %v", Diff(got, want))
	}
	if got.Desired.Revision != 3 {
		t.Errorf("desired revision %d, want 3", got.Desired.Revision)
	}
	for _, key := range []string{keyCore, keyDesiredRef} {
		st := maps.Clone(st)
		bad := bytes.Clone(st[key])
		bad[len(bad)/2] ^= 0x01
		st[key] = bad
		if _, err := LoadSummary(st); !errors.Is(err, ErrCorrupt) {
			t.Errorf("LoadSummary with %q damaged: got %v, want ErrCorrupt", key, err)
		}
	}
	if s, err := LoadSummary(memStore{}); err != nil || s.Desired != nil || s.Head != 0 {
		t.Errorf("LoadSummary of nothing: got %+v, %v, want the zero State", s, err)
	}
}
