package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// This file is planning: the steps of a reconcile, what observing each
// says it needs, and what a plan foresees of its apply (releases, missing
// parents, skips).

// ownedAs is what the projection said of a declared resource the host
// owned when the reconcile began: what a step needs of projector.Owned.
type ownedAs struct {
	digest  string // its SpecDigest
	failed  bool   // its last outcome failed
	drifted bool
	seq     uint64 // its last outcome's record
}

// Step is one resource's part in a reconcile.
type Step struct {
	ID   string
	Spec drivers.Spec // nil for a removal
	// Digest is drivers.SpecDigest(Spec), computed once.
	Digest string
	// Planned is what the plan said: created, updated, deleted, unchanged.
	Planned event.Action
	// Observation is what was seen before anything changed.
	Observation drivers.Observation
	// Drift is set when an owned resource, applied with this very spec, no
	// longer matches it: a change the mesh did not make.
	Drift bool
	// Outcome and Err are what applying did; Outcome is failed when Err is
	// set.
	Outcome event.Action
	Err     error
	// Note is the driver's remark on the outcome ("enablement only").
	Note string
	// DriftSeq is the drift.observed record's sequence, the repair's cause.
	DriftSeq uint64
	// Seq is the outcome's journal sequence (0 when none was journaled).
	Seq uint64
	// SkippedFor names the resource whose failure (or skip) this one
	// waited for, when its Outcome is Skipped.
	SkippedFor string
	// IDs are the ids the resource holds after its apply (a user's uid:
	// drivers.Numbered), journaled with its outcome.
	IDs []event.HeldID
	// owned is the projection's word on a declared resource the host
	// owned; nil when it did not.
	owned *ownedAs
	// deps are the steps applied before this one by its relations, and
	// notifies those its change owes a refresh (relate).
	deps, notifies []*Step
}

// foreseeSkips notes, in a plan, the steps that would be skipped because
// a step they depend on is foreseen to fail.
func foreseeSkips(steps []*Step) {
	for _, s := range steps {
		for _, d := range s.deps {
			if d.Err != nil && d.Planned != event.ActionUnchanged && s.Planned != event.ActionUnchanged {
				s.Note = fmt.Sprintf("would be skipped: %s would fail", d.ID)
				break
			}
		}
	}
}

// plan observes every declared resource and every owned one no longer
// declared, in parallel, and decides what each needs.
func (rc *Reconciler) plan(ctx context.Context, req Request) ([]*Step, error) {
	steps, err := rc.steps(req)
	if err != nil {
		return nil, err
	}
	err = rc.each(ctx, steps, rc.observe)
	if err == nil {
		rc.foreseeReleases(ctx, steps)
		rc.foreseeMissingParents(steps)
	}
	slices.SortStableFunc(steps, func(a, b *Step) int { return strings.Compare(a.ID, b.ID) })
	return steps, err
}

// steps are a step for each declared resource, with what the projection
// says of it, and one for each owned resource no longer declared: its
// removal or release.
func (rc *Reconciler) steps(req Request) ([]*Step, error) {
	declared := make(map[string]*Step, len(req.Specs))
	steps := make([]*Step, 0, len(req.Specs))
	if req.Digests != nil && len(req.Digests) != len(req.Specs) {
		return nil, fmt.Errorf("%d spec digests for %d specs", len(req.Digests), len(req.Specs))
	}
	for i, spec := range req.Specs {
		id := drivers.ID(spec)
		s := &Step{ID: id, Spec: spec}
		if req.Digests != nil {
			s.Digest = req.Digests[i]
		}
		declared[id] = s
		steps = append(steps, s)
	}
	if req.Owned == nil {
		return steps, nil
	}
	err := req.Owned.EachOwned(func(id string, o projector.Owned) error {
		switch s := declared[id]; {
		case s != nil:
			s.owned = &ownedAs{digest: o.SpecDigest, failed: o.LastOutcome == event.ActionFailed, drifted: o.Drifted, seq: o.Seq}
		case rc.Release != nil && rc.Release(id):
			steps = append(steps, &Step{ID: id, Planned: event.ActionReleased})
		default:
			steps = append(steps, &Step{ID: id, Planned: event.ActionDelete})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the owned resources: %w", err)
	}
	return steps, nil
}

// observe observes the resource a step declares and plans what it needs:
// nothing, a creation or an update, or the repair of drift.
func (rc *Reconciler) observe(ctx context.Context, s *Step) {
	if s.Spec == nil {
		return // removals need no observation: Remove of absent succeeds
	}
	if s.Digest == "" {
		s.Digest = drivers.SpecDigest(s.Spec)
	}
	d, err := rc.driver(s.ID)
	if err == nil {
		s.Observation, err = d.Observe(ctx, s.Spec)
	}
	switch {
	case err != nil:
		s.Planned, s.Err = event.ActionUpdate, fmt.Errorf("observe: %w", err)
	case s.Observation.Refused != nil:
		// What is there the driver never replaces: the plan says the
		// apply's failure, not an update (apply tries it again, as it
		// does every step whose observation failed).
		s.Planned, s.Err = event.ActionUpdate, s.Observation.Refused
	case s.Observation.InSync:
		// Before Exists: a package declared absent is in sync when
		// it does not exist.
		s.Planned = event.ActionUnchanged
	case !s.Observation.Exists:
		s.Planned = event.ActionCreate
	default:
		s.Planned = event.ActionUpdate
	}
	// Something the driver refuses to replace, where an owned resource
	// was as declared, is drift as much as an edit is.
	if o := s.owned; o != nil && s.Planned != event.ActionUnchanged && (s.Err == nil || s.Observation.Refused != nil) &&
		o.digest == s.Digest && !o.failed {
		s.Drift = true
	}
	if s.Planned != event.ActionUnchanged {
		// What the driver saw that a plan should say: why an exec
		// would run, what a unit's apply cannot do here.
		s.Note = s.Observation.Note
	}
}

// foreseeReleases plans as released the removals that their driver would
// leave in place (drivers.Leaver): a directory no longer declared that
// will still hold something once this reconcile has removed what it
// removes and laid down what it declares. The apply then releases it as
// planned, and a plan says so rather than "deleted". Deepest first, so
// that a directory left in place keeps its parent. A removal that
// foresight gets wrong is still released when Remove finds it so.
func (rc *Reconciler) foreseeReleases(ctx context.Context, steps []*Step) {
	if !rc.anyLeaver() {
		return
	}
	type removal struct {
		step   *Step
		path   string
		leaver drivers.Leaver
	}
	gone := make(map[string]bool)
	var declared []string // sorted below: what is beneath a path is found by search
	var leavable []removal
	for _, s := range steps {
		p := rc.pathOf(s)
		switch {
		case p == "":
		case s.Spec != nil:
			declared = append(declared, p)
		case s.Planned == event.ActionDelete:
			gone[p] = true
			if l, ok := rc.driverOf(s).(drivers.Leaver); ok {
				leavable = append(leavable, removal{s, p, l})
			}
		}
	}
	if len(leavable) == 0 {
		return
	}
	slices.Sort(declared)
	slices.SortFunc(leavable, func(a, b removal) int { return depth(b.path) - depth(a.path) })
	for _, r := range leavable {
		why := ""
		if i, _ := slices.BinarySearch(declared, r.path+"/"); i < len(declared) && strings.HasPrefix(declared[i], r.path+"/") {
			why = fmt.Sprintf("it holds %s, which is declared", declared[i])
		} else {
			spec, err := drivers.SpecForRemoval(r.step.ID)
			if err == nil {
				why, err = r.leaver.WouldLeave(ctx, spec, func(q string) bool { return gone[q] })
			}
			if err != nil {
				continue // the apply finds out
			}
		}
		if why != "" {
			r.step.Planned, r.step.Note = event.ActionReleased, fmt.Sprintf("left in place: %s", why)
			delete(gone, r.path)
		}
	}
}

// anyLeaver reports whether any driver can say it would leave a removal
// in place (drivers.Leaver).
func (rc *Reconciler) anyLeaver() bool {
	for _, d := range rc.Drivers {
		if _, ok := d.(drivers.Leaver); ok {
			return true
		}
	}
	return false
}

// foreseeMissingParents gives a plan's creation of a resource whose
// driver creates no parents (drivers.Nested: a file, directory or
// archive) the error its apply would meet when its parent directory
// neither exists nor is declared. A plan that said "created" there would
// be the plan of an apply that fails. The step's error is only the
// plan's: apply tries it again, as it does every step whose observation
// failed. A creation beneath a declared directory that itself cannot be
// created is told so too.
func (rc *Reconciler) foreseeMissingParents(steps []*Step) {
	if rc.Root == nil {
		return
	}
	type creation struct {
		step *Step
		path string
	}
	var made []creation
	declared := make(map[string]*Step) // the directories a declaration lays down, by path
	for _, s := range steps {
		n := rc.nested(s)
		if n == nil {
			continue
		}
		p := n.PathOf(s.Spec)
		if n.IsDirectory(s.Spec) {
			declared[p] = s
		}
		if s.Planned == event.ActionCreate && s.Err == nil {
			made = append(made, creation{s, p})
		}
	}
	// Shallowest first: a declared parent is judged before what it holds.
	slices.SortStableFunc(made, func(a, b creation) int { return depth(a.path) - depth(b.path) })
	exists := make(map[string]bool)
	for _, c := range made {
		dir := path.Dir(c.path)
		if dir == "/" {
			continue
		}
		kind := c.step.Spec.Kind()
		if p := declared[dir]; p != nil {
			if errors.Is(p.Err, drivers.ErrNoParent) {
				c.step.Err = fmt.Errorf("%s %s: %w: its directory %s cannot be created either", kind, c.path, drivers.ErrNoParent, dir)
			}
			continue
		}
		there, seen := exists[dir]
		if !seen {
			there = rc.dirExists(dir)
			exists[dir] = there
		}
		if !there {
			c.step.Err = drivers.NoParent(kind, c.path)
		}
	}
}

// dirExists reports whether a directory is at dir beneath the root. Only
// absence is foreseen; anything else in the way (a symlink, a file) the
// driver refuses in its own words.
func (rc *Reconciler) dirExists(dir string) bool {
	f, err := rc.Root.OpenDir(dir)
	if err == nil {
		f.Close()
	}
	return !errors.Is(err, fs.ErrNotExist)
}

// depth is how many directories deep the clean absolute path p is.
func depth(p string) int { return strings.Count(p, "/") }

// pathOf is where the resource of s lies beneath the root, as its driver
// says (drivers.Located); empty when it has no path there (a package).
func (rc *Reconciler) pathOf(s *Step) string {
	l, ok := rc.driverOf(s).(drivers.Located)
	if !ok {
		return ""
	}
	spec := s.Spec
	if spec == nil {
		var err error
		if spec, err = drivers.SpecForRemoval(s.ID); err != nil {
			return ""
		}
	}
	return l.PathOf(spec)
}

// nested is the driver of a declared step as drivers.Nested: nil when
// the step declares nothing or its driver creates its parents or has
// none.
func (rc *Reconciler) nested(s *Step) drivers.Nested {
	if s.Spec == nil {
		return nil
	}
	n, _ := rc.driverOf(s).(drivers.Nested)
	return n
}
