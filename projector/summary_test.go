package projector

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/journal/event"
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

// TestCountOwned: CountOwned counts what Load holds, finds damage as
// EachOwned does, and allocates nothing for each resource.
func TestCountOwned(t *testing.T) {
	recs, _ := storedSample(t)
	st := storeOf(t, numbered(append(recs,
		applied(issue, event.ActionFailed, "sha256:bb", "disk full"),
		rec(event.DriftObserved, motd, event.DriftObservedPayload{Differs: []string{"mode"}}))...))
	whole, err := Load(st)
	if err != nil {
		t.Fatal(err)
	}
	var want OwnedCounts
	for _, o := range whole.Owned {
		want.Owned++
		if o.Drifted {
			want.Drifted++
		}
		if o.LastOutcome == event.ActionFailed {
			want.Failed++
		}
	}
	got, err := CountOwned(st)
	if err != nil || got != want {
		t.Errorf("CountOwned: got %+v, %v, want %+v", got, err, want)
	}
	if want != (OwnedCounts{Owned: 2, Drifted: 1, Failed: 1}) {
		t.Fatalf("the sample owns %+v, want 2 owned, 1 drifted, 1 failed", want)
	}
	for key := range st {
		if !strings.HasPrefix(key, prefixOwned) {
			continue
		}
		for i := range st[key] {
			bad := maps.Clone(st)
			bad[key] = bytes.Clone(st[key])
			bad[key][i] ^= 0x01
			if _, err := CountOwned(bad); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("CountOwned with byte %d of %q flipped: got %v, want ErrCorrupt", i, key, err)
			}
		}
	}

	// A thousand owned cost no more allocations than two.
	many := []event.Record{}
	for i := range 1000 {
		many = append(many, applied(fmt.Sprintf("file:/etc/f%04d", i), event.ActionCreate, "sha256:aa", ""))
	}
	big := storeOf(t, numbered(many...))
	small := testing.AllocsPerRun(10, func() { _, _ = CountOwned(st) })
	large := testing.AllocsPerRun(10, func() { _, _ = CountOwned(big) })
	// What the test's store allocates to walk itself (a bucket does not).
	walk := testing.AllocsPerRun(10, func() { _ = big.ForEach(func(_, _ []byte) error { return nil }) })
	if large > walk+small {
		t.Errorf("CountOwned of 1,000 owned made %v allocations (the store's walk %v), of 2 %v: it allocates for each", large, walk, small)
	}
}
