package projector

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"maps"
	"slices"
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
	for _, k := range []string{keyFormat, keyCore, keyDesired, keyDesiredRef, prefixOwned + motd, prefixOwned + issue} {
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
				if _, err := LoadCore(st); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("LoadCore with byte %d of %q flipped (^%#x): got error %v, want ErrCorrupt", i, key, bit, err)
				}
				if strings.HasPrefix(key, prefixOwned) || key == keyFormat {
					if err := EachOwned(st, func(string, Owned) error { return nil }); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("EachOwned with byte %d of %q flipped: got error %v, want ErrCorrupt", i, key, err)
					}
				}
				if key == keyDesired || key == keyFormat {
					if _, err := LoadDesired(st); !errors.Is(err, ErrCorrupt) {
						t.Fatalf("LoadDesired with byte %d of %q flipped: got error %v, want ErrCorrupt", i, key, err)
					}
				}
				// A fold of next reads every key but desired and its ref.
				if key != keyDesired && key != keyDesiredRef {
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

// TestLoadCoreAndEachOwned: LoadCore is Load without the owned set, and
// EachOwned walks that set, in the order of its IDs.
func TestLoadCoreAndEachOwned(t *testing.T) {
	_, st := storedSample(t)
	whole, err := Load(st)
	if err != nil {
		t.Fatal(err)
	}
	core, err := LoadCore(st)
	if err != nil {
		t.Fatal(err)
	}
	if core.Owned != nil {
		t.Errorf("LoadCore kept %d owned resources", len(core.Owned))
	}
	want := whole
	want.Owned = nil
	if !Equal(core, want) {
		t.Errorf("LoadCore differs from Load but for the owned set: %v", Diff(core, want))
	}
	walked := map[string]Owned{}
	var order []string
	if err := EachOwned(st, func(id string, o Owned) error {
		walked[id] = o
		order = append(order, id)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(walked, whole.Owned) || len(walked) != 2 || !slices.IsSorted(order) {
		t.Errorf("EachOwned walked %v in the order %v; Load has %v", walked, order, whole.Owned)
	}
	stop := errors.New("stop")
	n := 0
	if err := EachOwned(st, func(string, Owned) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("EachOwned went on after fn's error: %v after %d calls", err, n)
	}
}

// TestDesiredRef: a completion's fold reads the desired declaration's
// revision, digest and seq from desired-ref; one written with another
// desired value (by a version that does not keep it) is not used, and a
// damaged one is ErrCorrupt.
func TestDesiredRef(t *testing.T) {
	recs, good := storedSample(t)
	want, err := LoadDesired(good)
	if err != nil || want == nil {
		t.Fatalf("LoadDesired: %v, %v", want, err)
	}
	d, err := loadDesiredRef(good, true)
	if err != nil || d.Revision != want.Revision || d.Digest != want.Digest || d.Seq != want.Seq {
		t.Fatalf("got ref %+v (%v), want the desired %+v", d, err, want)
	}
	if ref, err := storedDesiredRef(good); err != nil || ref == nil {
		t.Fatalf("the fold wrote no usable desired-ref: %v, %v", ref, err)
	}

	// The desired value replaced, the ref left: an older version's write.
	stale := maps.Clone(good)
	other := *want
	other.Revision, other.Seq = 9, 1
	b, err := json.Marshal(&other)
	if err != nil {
		t.Fatal(err)
	}
	stale[keyDesired] = seal(keyDesired, b)
	if ref, err := storedDesiredRef(stale); err != nil || ref != nil {
		t.Errorf("a ref of another desired value: got %+v, %v, want none", ref, err)
	}
	if d, err := loadDesiredRef(stale, true); err != nil || d.Revision != 9 {
		t.Errorf("with a stale ref: got %+v, %v, want revision 9 from the desired value", d, err)
	}

	// Damaged: every reader that reads it stops.
	bad := maps.Clone(good)
	bad[keyDesiredRef] = bytes.Clone(good[keyDesiredRef])
	bad[keyDesiredRef][0] ^= 0x01
	completion := numbered(append(recs, rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{Revision: 3, Result: event.ResultConverged}))...)[len(recs):]
	if err := new(Stored).Fold(bad, completion); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a completion's fold with desired-ref damaged: got %v, want ErrCorrupt", err)
	}
	if err := new(Stored).Fold(maps.Clone(good), completion); err != nil {
		t.Errorf("a completion's fold: %v", err)
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
		case k == keyFormat, k == keyDesiredRef:
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

// TestPendingPlanApart: the plan of a reconcile in progress is kept under
// pending-plan, not in the core that every fold of its outcomes rewrites;
// Load puts it back; the completion drops it; a plan of another reconcile
// is not used; damage to it is ErrCorrupt; a core that holds a plan (as
// written before) is read as it is and moved apart by the next fold.
func TestPendingPlanApart(t *testing.T) {
	plan := []event.Step{{Resource: motd, Action: event.ActionCreate}, {Resource: issue, Action: event.ActionUpdate}}
	recs := numbered(
		rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 3, Digest: "sha256:dd"}),
		rec(event.ReconcileStarted, "", event.ReconcileStartedPayload{Trigger: event.TriggerPushed, Revision: 3, Plan: plan}),
		applied(motd, event.ActionCreate, "sha256:aa", ""),
		rec(event.ReconcileCompleted, "", event.ReconcileCompletedPayload{Revision: 3, Result: event.ResultConverged}),
	)
	st := storeOf(t, recs[:2])
	if bytes.Contains(st[keyCore], []byte(`"plan"`)) || st[keyPendingPlan] == nil {
		t.Fatalf("after a reconcile.started the core holds %q, pending-plan %q", st[keyCore], st[keyPendingPlan])
	}
	loaded := func(st memStore) State {
		t.Helper()
		s, err := Load(st)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if s := loaded(st); s.Pending == nil || !slices.Equal(s.Pending.Plan, plan) {
		t.Fatalf("Load: pending %+v, want the plan %v", s.Pending, plan)
	}
	kept := bytes.Clone(st[keyPendingPlan])
	if err := new(Stored).Fold(st, recs[2:3]); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(st[keyPendingPlan], kept) || !slices.Equal(loaded(st).Pending.Plan, plan) {
		t.Errorf("an outcome's fold changed the plan kept: %q", st[keyPendingPlan])
	}

	// Damage to it is damage.
	bad := maps.Clone(st)
	bad[keyPendingPlan] = bytes.Clone(kept)
	bad[keyPendingPlan][9] ^= 0x01
	if _, err := Load(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Load with pending-plan damaged: got %v, want ErrCorrupt", err)
	}

	// Another reconcile's plan, left behind: not used, and dropped.
	stale := maps.Clone(st)
	other := append(binary.BigEndian.AppendUint64(nil, 99), `[{"resource":"file:/x","action":"created"}]`...)
	stale[keyPendingPlan] = seal(keyPendingPlan, other)
	if s := loaded(stale); s.Pending == nil || s.Pending.Plan != nil {
		t.Errorf("with another reconcile's plan kept: pending %+v, want no plan", s.Pending)
	}
	another := applied(issue, event.ActionUpdate, "sha256:bb", "")
	another.Seq = 4
	if err := new(Stored).Fold(stale, []event.Record{another}); err != nil {
		t.Fatal(err)
	}
	if stale[keyPendingPlan] != nil {
		t.Errorf("a fold left another reconcile's plan: %q", stale[keyPendingPlan])
	}

	// The completion drops it.
	if err := new(Stored).Fold(st, recs[3:]); err != nil {
		t.Fatal(err)
	}
	if st[keyPendingPlan] != nil {
		t.Errorf("after the completion pending-plan is still there: %q", st[keyPendingPlan])
	}
	if want := storeOf(t, recs); !maps.EqualFunc(st, want, bytes.Equal) {
		t.Errorf("folded in parts, the store differs from one folded at once")
	}

	// A core that holds the plan, as written before pending-plan.
	old := storeOf(t, recs[:2])
	delete(old, keyPendingPlan)
	var core map[string]any
	body, err := unseal(keyCore, old[keyCore], true)
	if err != nil || json.Unmarshal(body, &core) != nil {
		t.Fatalf("core: %v", err)
	}
	core["pending"].(map[string]any)["plan"] = plan
	b, err := json.Marshal(core)
	if err != nil {
		t.Fatal(err)
	}
	old[keyCore] = seal(keyCore, b)
	if s := loaded(old); !slices.Equal(s.Pending.Plan, plan) {
		t.Errorf("a core holding the plan: pending %+v", s.Pending)
	}
	if err := new(Stored).Fold(old, recs[2:3]); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(old[keyCore], []byte(`"plan"`)) || !slices.Equal(loaded(old).Pending.Plan, plan) {
		t.Errorf("the next fold did not move the core's plan apart: core %q", old[keyCore])
	}
}
