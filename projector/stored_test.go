package projector

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/journal/event"
)

// storedSample is a projection with every kind of key: the format, the
// core, a desired state and two owned resources.
func storedSample(t *testing.T) ([]event.Record, memStore) {
	t.Helper()
	recs := numbered(
		rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 3, Digest: "sha256:dd", Resources: []event.DeclaredResource{
			{ID: motd, SpecDigest: "sha256:aa"}, {ID: issue, SpecDigest: "sha256:bb"},
		}}),
		applied(motd, event.ActionCreate, "sha256:aa", ""),
		applied(issue, event.ActionCreate, "sha256:bb", "disk full"),
	)
	st := storeOf(t, recs)
	for _, k := range []string{keyFormat, keyCore, keyDesired, prefixOwned + motd, prefixOwned + issue} {
		if st[k] == nil {
			t.Fatalf("the sample has no %q: %v", k, st)
		}
	}
	return recs, st
}

// TestStoredChecksums: a byte flipped anywhere in any stored value, or in
// the key of an owned resource, is ErrCorrupt for every reader of that
// value (Load, LoadDesired, and a Fold that reads it), never a State.
func TestStoredChecksums(t *testing.T) {
	recs, good := storedSample(t)
	next := numbered(append(recs, applied(motd, event.ActionUpdate, "sha256:cc", ""), applied(issue, event.ActionUpdate, "sha256:ee", ""))...)[len(recs):]
	for key, v := range good {
		for i := range v {
			for _, bit := range []byte{0x01, 0x80} {
				st := maps.Clone(good)
				bad := bytes.Clone(v)
				bad[i] ^= bit
				st[key] = bad
				if _, err := Load(st); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Load with byte %d of %q flipped (^%#x): got error %v, want ErrCorrupt", i, key, bit, err)
				}
				if key == keyDesired || key == keyFormat {
					if _, err := LoadDesired(st); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("LoadDesired with byte %d of %q flipped: got error %v, want ErrCorrupt", i, key, err)
					}
				}
				// A fold of next reads every key but desired.
				if key != keyDesired {
					if err := new(Stored).Fold(st, next); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("Fold with byte %d of %q flipped: got error %v, want ErrCorrupt", i, key, err)
					}
				}
			}
		}
	}
	// A flipped key: an owned resource's value under another resource's
	// name, or the core lost.
	for from, to := range map[string]string{prefixOwned + motd: prefixOwned + "file:/etc/motc", keyCore: "corE"} {
		st := maps.Clone(good)
		st[to] = st[from]
		delete(st, from)
		if _, err := Load(st); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Load with key %q flipped to %q: got error %v, want ErrCorrupt", from, to, err)
		}
	}
}

// TestStoredLayout1: a projection written before checksums (no format, no
// checksums) loads as it is, and the first Fold into it rewrites it whole in
// the current layout: the store then holds what a fresh fold would.
func TestStoredLayout1(t *testing.T) {
	recs, sealed := storedSample(t)
	old := memStore{}
	for k, v := range sealed {
		switch {
		case k == keyFormat:
		case k == keyCore || k == keyDesired || strings.HasPrefix(k, prefixOwned):
			old[k] = v[:len(v)-checksumSize]
		default:
			t.Fatalf("unexpected key %q", k)
		}
	}
	got, err := Load(old)
	if err != nil {
		t.Fatalf("Load of layout 1: %v", err)
	}
	if want := Replay(State{}, recs); !Equal(got, want) {
		t.Fatalf("Load of layout 1:\n%s", strings.Join(Diff(got, want), "\n"))
	}
	if d, err := LoadDesired(old); err != nil || d == nil || d.Revision != 3 {
		t.Fatalf("LoadDesired of layout 1: got %+v, %v; want revision 3", d, err)
	}
	more := numbered(append(recs, applied(motd, event.ActionUpdate, "sha256:cc", ""))...)
	if err := new(Stored).Fold(old, more[len(recs):]); err != nil {
		t.Fatalf("Fold into layout 1: %v", err)
	}
	if want := storeOf(t, more); !maps.EqualFunc(old, want, bytes.Equal) {
		t.Fatalf("after a fold into layout 1 the store holds\n%v\nwant\n%v", old, want)
	}
	// Layout 1 has no checksums, but what does not decode is still damage.
	if err := new(Stored).Fold(memStore{keyCore: []byte(`{"head":1`)}, more[1:2]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Fold into a damaged layout-1 core: got error %v, want ErrCorrupt", err)
	}
	if _, err := Load(memStore{keyFormat: []byte("9")}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Load of an unknown layout: got error %v, want ErrCorrupt", err)
	}
}
