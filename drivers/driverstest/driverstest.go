// Package driverstest is the one conformance suite every driver passes:
// Observe never changes anything, Apply creates, updates and is stable when
// repeated, Remove is idempotent, a cancelled context returns promptly, a
// spec of another kind is refused, and a Stager's two phases equal Apply.
//
// A driver's own tests call Run with a Fixture over a fresh root; what is
// particular to one kind (atomic writes, symlinks, owners) is tested beside
// the driver, not here. This package is for tests only.
package driverstest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
)

// Fixture is one driver over a fresh root, with what the suite needs.
type Fixture struct {
	Driver drivers.Driver
	// Specs are at least two distinct valid specs the driver can apply in
	// this root, independent of each other.
	Specs []drivers.Spec
	// Changed returns a copy of spec altered so that applying it is an
	// update (other content, other mode...). It keeps spec's identity
	// (drivers.ID) and leaves spec itself as it was. It is nil for a kind
	// that has no update (a package is present or absent): the suite then
	// skips what needs one.
	Changed func(spec drivers.Spec) drivers.Spec
	// Snapshot describes everything the driver manages in this root (e.g.
	// a listing of the root tree with modes, owners and content hashes; or
	// a package database's status), so the suite can prove Observe changes
	// nothing and a second Apply is stable. Two snapshots of the same state
	// must be equal: leave out times and anything else that moves by itself
	// (Tree does).
	Snapshot func(t *testing.T) string
}

// promptly is how long a call with a cancelled context may take.
const promptly = 2 * time.Second

// Run runs the suite; newFixture is called once per subtest with that
// subtest's t (use t.TempDir()).
func Run(t *testing.T, newFixture func(t *testing.T) Fixture) {
	t.Helper()
	fixture := func(t *testing.T) *suite {
		t.Helper()
		s := &suite{t: t, Fixture: newFixture(t)}
		s.check()
		return s
	}

	t.Run("ObserveAbsent", func(t *testing.T) {
		s := fixture(t)
		for _, spec := range s.Specs {
			s.wantAbsent(spec)
		}
	})

	t.Run("ApplyCreates", func(t *testing.T) {
		s := fixture(t)
		for _, spec := range s.Specs {
			s.wantAction(spec, drivers.Created)
			s.wantInSync(spec)
		}
	})

	t.Run("SpecsIndependent", func(t *testing.T) {
		s := fixture(t)
		first, second := s.Specs[0], s.Specs[1]
		s.wantAction(first, drivers.Created)
		s.wantAbsent(second)
		s.wantAction(second, drivers.Created)
		s.remove(first)
		s.wantAbsent(first)
		s.wantInSync(second)
	})

	t.Run("ApplyTwiceStable", func(t *testing.T) {
		s := fixture(t)
		spec := s.Specs[0]
		s.wantAction(spec, drivers.Created)
		before := s.Snapshot(t)
		s.wantAction(spec, drivers.Unchanged)
		s.sameSnapshot(before, "a second Apply of "+drivers.ID(spec))
		s.wantInSync(spec)
	})

	t.Run("ApplyChangedUpdates", func(t *testing.T) {
		s := fixture(t)
		s.needChanged()
		spec := s.Specs[0]
		changed := s.changed(spec)
		s.wantAction(spec, drivers.Created)
		obs := s.observe(changed)
		if !obs.Exists || obs.InSync || len(obs.Differs) == 0 || slices.Contains(obs.Differs, "absent") {
			t.Errorf("Observe(changed %s) before applying it = %+v, want Exists, not InSync, Differs naming what differs (not absent)", drivers.ID(spec), obs)
		}
		s.wantAction(changed, drivers.Updated)
		s.wantInSync(changed)
		s.wantAction(changed, drivers.Unchanged)
	})

	t.Run("RemoveThenObserveAbsent", func(t *testing.T) {
		s := fixture(t)
		spec := s.Specs[0]
		s.wantAction(spec, drivers.Created)
		s.remove(spec)
		s.wantAbsent(spec)
	})

	t.Run("RemoveTwice", func(t *testing.T) {
		s := fixture(t)
		spec := s.Specs[0]
		s.wantAction(spec, drivers.Created)
		s.remove(spec)
		before := s.Snapshot(t)
		s.remove(spec)
		s.sameSnapshot(before, "a second Remove of "+drivers.ID(spec))
		s.wantAbsent(spec)
	})

	t.Run("RemoveNeverApplied", func(t *testing.T) {
		s := fixture(t)
		for _, spec := range s.Specs {
			before := s.Snapshot(t)
			s.remove(spec)
			s.sameSnapshot(before, "Remove of never-applied "+drivers.ID(spec))
		}
	})

	t.Run("CancelledContext", func(t *testing.T) {
		s := fixture(t)
		applied, absent := s.Specs[0], s.Specs[1]
		s.wantAction(applied, drivers.Created)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		before := s.Snapshot(t)
		type call struct {
			name string
			call func() error
		}
		calls := []call{
			{"Observe(applied)", func() error { _, err := s.Driver.Observe(ctx, applied); return err }},
			{"Observe(absent)", func() error { _, err := s.Driver.Observe(ctx, absent); return err }},
			{"Apply(absent)", func() error { _, err := s.Driver.Apply(ctx, absent); return err }},
			{"Remove(applied)", func() error { return s.Driver.Remove(ctx, applied) }},
		}
		if s.Changed != nil {
			changed := s.changed(applied)
			calls = append(calls, call{"Apply(changed)", func() error { _, err := s.Driver.Apply(ctx, changed); return err }})
		}
		if st, ok := s.Driver.(drivers.Stager); ok {
			calls = append(calls, call{"Stage(absent)", func() error {
				p, err := st.Stage(ctx, absent)
				if p != nil {
					p.Abort()
				}
				return err
			}})
		}
		for _, c := range calls {
			err := within(t, c.name, c.call)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s with a cancelled context: got error %v, want one wrapping context.Canceled", c.name, err)
			}
		}
		s.sameSnapshot(before, "calls with a cancelled context")
	})

	t.Run("WrongKind", func(t *testing.T) {
		s := fixture(t)
		kind := s.Specs[0].Kind()
		before := s.Snapshot(t)
		for _, other := range otherKinds(kind) {
			name := fmt.Sprintf("%T", other)
			if _, err := s.Driver.Observe(t.Context(), other); !errors.Is(err, drivers.ErrWrongKind) {
				t.Errorf("Observe(%s): got error %v, want one wrapping drivers.ErrWrongKind", name, err)
			}
			if _, err := s.Driver.Apply(t.Context(), other); !errors.Is(err, drivers.ErrWrongKind) {
				t.Errorf("Apply(%s): got error %v, want one wrapping drivers.ErrWrongKind", name, err)
			}
			if err := s.Driver.Remove(t.Context(), other); !errors.Is(err, drivers.ErrWrongKind) {
				t.Errorf("Remove(%s): got error %v, want one wrapping drivers.ErrWrongKind", name, err)
			}
			if st, ok := s.Driver.(drivers.Stager); ok {
				p, err := st.Stage(t.Context(), other)
				if !errors.Is(err, drivers.ErrWrongKind) {
					t.Errorf("Stage(%s): got error %v, want one wrapping drivers.ErrWrongKind", name, err)
				}
				if p != nil {
					t.Errorf("Stage(%s) returned a Pending (%T) with its error, want nil", name, p)
					p.Abort()
				}
			}
		}
		s.sameSnapshot(before, "calls with specs of other kinds")
	})

	t.Run("Stager", func(t *testing.T) {
		t.Run("AbortLeavesNothing", func(t *testing.T) {
			s := fixture(t)
			st := s.stager()
			spec := s.Specs[0]
			before := s.Snapshot(t)
			p := s.stage(st, spec)
			s.wantAbsent(spec) // nothing is visible before Commit
			p.Abort()
			s.sameSnapshot(before, "Stage then Abort of "+drivers.ID(spec))

			if s.Changed == nil {
				return // the kind has no update
			}
			s.wantAction(spec, drivers.Created)
			before = s.Snapshot(t)
			p = s.stage(st, s.changed(spec))
			s.wantInSync(spec)
			p.Abort()
			s.sameSnapshot(before, "Stage then Abort of changed "+drivers.ID(spec))
		})

		t.Run("CommitEqualsApply", func(t *testing.T) {
			s := fixture(t)
			st := s.stager()
			spec := s.Specs[0]

			s.wantCommit(s.stage(st, spec), spec, drivers.Created)
			s.wantInSync(spec)
			committed := s.Snapshot(t)
			s.wantAction(spec, drivers.Unchanged)
			s.remove(spec)
			s.wantAction(spec, drivers.Created)
			s.wantSnapshot(committed, "the snapshot after Apply of "+drivers.ID(spec)+" differs from the one after its Stage and Commit")

			if s.Changed == nil {
				return // the kind has no update
			}
			changed := s.changed(spec)
			s.wantCommit(s.stage(st, changed), changed, drivers.Updated)
			s.wantInSync(changed)
			committed = s.Snapshot(t)
			s.wantAction(spec, drivers.Updated)
			s.wantAction(changed, drivers.Updated)
			s.wantSnapshot(committed, "the snapshot after Apply of changed "+drivers.ID(spec)+" differs from the one after its Stage and Commit")
		})

		t.Run("InSyncReturnsNil", func(t *testing.T) {
			s := fixture(t)
			st := s.stager()
			spec := s.Specs[0]
			s.wantAction(spec, drivers.Created)
			before := s.Snapshot(t)
			p, err := st.Stage(t.Context(), spec)
			if err != nil {
				t.Fatalf("Stage(in-sync %s): %v", drivers.ID(spec), err)
			}
			if p != nil {
				t.Errorf("Stage(in-sync %s) = %T, want nil", drivers.ID(spec), p)
				p.Abort()
			}
			s.sameSnapshot(before, "Stage of in-sync "+drivers.ID(spec))
		})
	})
}

// suite is one fixture in one subtest.
type suite struct {
	t *testing.T
	Fixture
}

// check refuses a fixture the suite cannot use.
func (s *suite) check() {
	t := s.t
	t.Helper()
	switch {
	case s.Driver == nil:
		t.Fatal("fixture: Driver is nil")
	case len(s.Specs) < 2:
		t.Fatalf("fixture: got %d Specs, want at least 2", len(s.Specs))
	case s.Snapshot == nil:
		t.Fatal("fixture: Snapshot is nil")
	}
	seen := map[string]bool{}
	for _, spec := range s.Specs {
		if spec == nil {
			t.Fatal("fixture: a spec is nil")
		}
		if spec.Kind() != s.Specs[0].Kind() {
			t.Fatalf("fixture: specs of kinds %s and %s, want one kind", s.Specs[0].Kind(), spec.Kind())
		}
		if seen[drivers.ID(spec)] {
			t.Fatalf("fixture: two specs are %s, want distinct resources", drivers.ID(spec))
		}
		seen[drivers.ID(spec)] = true
	}
}

// changed calls the fixture's Changed and checks what it returns.
func (s *suite) changed(spec drivers.Spec) drivers.Spec {
	t := s.t
	t.Helper()
	digest := drivers.SpecDigest(spec)
	c := s.Changed(spec)
	switch {
	case c == nil:
		t.Fatalf("fixture: Changed(%s) is nil", drivers.ID(spec))
	case drivers.SpecDigest(spec) != digest:
		t.Fatalf("fixture: Changed(%s) altered its argument, want a copy", drivers.ID(spec))
	case drivers.ID(c) != drivers.ID(spec):
		t.Fatalf("fixture: Changed(%s) is %s, want the same resource", drivers.ID(spec), drivers.ID(c))
	case drivers.SpecDigest(c) == digest:
		t.Fatalf("fixture: Changed(%s) is the same spec, want it altered", drivers.ID(spec))
	}
	return c
}

// needChanged skips the rest of the test when the kind has no update.
func (s *suite) needChanged() {
	s.t.Helper()
	if s.Changed == nil {
		s.t.Skip("fixture: Changed is nil: the kind has no update")
	}
}

func (s *suite) stager() drivers.Stager {
	s.t.Helper()
	st, ok := s.Driver.(drivers.Stager)
	if !ok {
		s.t.Skipf("%T does not implement drivers.Stager", s.Driver)
	}
	return st
}

// stage stages spec, which must need a change.
func (s *suite) stage(st drivers.Stager, spec drivers.Spec) drivers.Pending {
	t := s.t
	t.Helper()
	p, err := st.Stage(t.Context(), spec)
	if err != nil {
		t.Fatalf("Stage(%s): %v", drivers.ID(spec), err)
	}
	if p == nil {
		t.Fatalf("Stage(%s) = nil, want a Pending: the resource does not match", drivers.ID(spec))
	}
	return p
}

func (s *suite) wantCommit(p drivers.Pending, spec drivers.Spec, want drivers.Action) {
	t := s.t
	t.Helper()
	got, err := p.Commit()
	if err != nil {
		t.Fatalf("Commit of staged %s: %v", drivers.ID(spec), err)
	}
	if got != want {
		t.Errorf("Commit of staged %s: got %q, want %q", drivers.ID(spec), got, want)
	}
}

// observe observes spec and proves that doing so changed nothing.
func (s *suite) observe(spec drivers.Spec) drivers.Observation {
	t := s.t
	t.Helper()
	before := s.Snapshot(t)
	obs, err := s.Driver.Observe(t.Context(), spec)
	if err != nil {
		t.Fatalf("Observe(%s): %v", drivers.ID(spec), err)
	}
	s.sameSnapshot(before, "Observe of "+drivers.ID(spec))
	if obs.InSync != (len(obs.Differs) == 0) {
		t.Errorf("Observe(%s) = %+v: InSync %v with Differs %q, want InSync exactly when nothing differs", drivers.ID(spec), obs, obs.InSync, obs.Differs)
	}
	return obs
}

func (s *suite) wantAbsent(spec drivers.Spec) {
	t := s.t
	t.Helper()
	obs := s.observe(spec)
	if obs.Exists || obs.InSync || !slices.Contains(obs.Differs, "absent") || obs.Seen != "" {
		t.Errorf("Observe(%s) = %+v, want absent: Exists false, InSync false, Differs containing \"absent\", Seen empty", drivers.ID(spec), obs)
	}
}

func (s *suite) wantInSync(spec drivers.Spec) {
	t := s.t
	t.Helper()
	obs := s.observe(spec)
	if !obs.Exists || !obs.InSync || len(obs.Differs) != 0 {
		t.Errorf("Observe(%s) = %+v, want Exists and InSync with nothing in Differs", drivers.ID(spec), obs)
	}
}

func (s *suite) wantAction(spec drivers.Spec, want drivers.Action) {
	t := s.t
	t.Helper()
	got, err := s.Driver.Apply(t.Context(), spec)
	if err != nil {
		t.Fatalf("Apply(%s): %v", drivers.ID(spec), err)
	}
	if got != want {
		t.Errorf("Apply(%s): got %q, want %q", drivers.ID(spec), got, want)
	}
}

// remove removes what spec names the way the reconciler does once a
// declaration stops naming it: with only the key, from SpecForRemoval.
func (s *suite) remove(spec drivers.Spec) {
	t := s.t
	t.Helper()
	keyOnly, err := drivers.SpecForRemoval(drivers.ID(spec))
	if err != nil {
		t.Fatalf("SpecForRemoval(%s): %v", drivers.ID(spec), err)
	}
	if err := s.Driver.Remove(t.Context(), keyOnly); err != nil {
		t.Fatalf("Remove(%s) with only its key: %v", drivers.ID(spec), err)
	}
}

// sameSnapshot fails the test if the snapshot is no longer before.
func (s *suite) sameSnapshot(before, what string) {
	s.t.Helper()
	s.wantSnapshot(before, what+" changed the snapshot")
}

func (s *suite) wantSnapshot(want, msg string) {
	t := s.t
	t.Helper()
	if got := s.Snapshot(t); got != want {
		t.Errorf("%s:\n got: %s\nwant: %s", msg, got, want)
	}
}

// within runs call and fails the test if it takes longer than promptly.
func within(t *testing.T, name string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	timer := time.NewTimer(promptly)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		t.Fatalf("%s with a cancelled context did not return within %v", name, promptly)
		return nil
	}
}

// otherKinds is one spec of every kind but kind, and one of a kind no
// driver knows.
func otherKinds(kind drivers.Kind) []drivers.Spec {
	all := []drivers.Spec{
		&drivers.FileSpec{Path: "/driverstest/wrong-kind", Content: "x"},
		&drivers.DirectorySpec{Path: "/driverstest/wrong-kind"},
		&drivers.ArchiveSpec{Path: "/driverstest/wrong-kind", Source: "file:///nonexistent", Digest: "sha256:" + fmt.Sprintf("%064x", 0), Format: drivers.FormatTar},
		&drivers.PackageSpec{Name: "driverstest-wrong-kind"},
		&drivers.UnitSpec{Name: "driverstest-wrong-kind.service"},
		unknownSpec{},
	}
	return slices.DeleteFunc(all, func(s drivers.Spec) bool { return s.Kind() == kind })
}

// unknownSpec is a spec of a kind no driver knows.
type unknownSpec struct{}

func (unknownSpec) Kind() drivers.Kind { return "driverstest-unknown" }
func (unknownSpec) Key() string        { return "/driverstest/unknown" }
