package agent

import (
	"path"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
)

// levels orders steps for applying: groups, then users (a file's owner
// may be a user declared beside it), directories shallow to deep, then
// packages, then files and archives, then execs (a migration after the
// release it runs), then units; removals in the reverse order (units,
// files and archives, packages, directories deep to shallow, users,
// groups), after everything created, since a removed directory must
// first lose the files the host owned in it.
func levels(steps []*Step) [][]*Step {
	rank := func(s *Step) int {
		kind, key, _ := drivers.SplitID(s.ID)
		depth := strings.Count(key, "/")
		const dirs = 1000 // room for any depth
		if s.Planned != event.ActionDelete && s.Planned != event.ActionReleased {
			switch kind {
			case drivers.KindGroup:
				return -2
			case drivers.KindUser:
				return -1
			case drivers.KindDirectory:
				return depth
			case drivers.KindPackage:
				return dirs + 1
			case drivers.KindFile, drivers.KindArchive:
				return dirs + 2
			case drivers.KindExec:
				return dirs + 3
			}
			return dirs + 4 // units last: their files and packages first
		}
		switch kind {
		case drivers.KindUnit, drivers.KindExec:
			return 2*dirs + 4
		case drivers.KindFile, drivers.KindArchive:
			return 2*dirs + 5
		case drivers.KindPackage:
			return 2*dirs + 6
		case drivers.KindUser:
			return 4*dirs + 1
		case drivers.KindGroup:
			return 4*dirs + 2
		}
		return 4*dirs - depth // directories, deepest first
	}
	byRank := map[int][]*Step{}
	var ranks []int
	for _, s := range steps {
		r := rank(s)
		if _, ok := byRank[r]; !ok {
			ranks = append(ranks, r)
		}
		byRank[r] = append(byRank[r], s)
	}
	slices.Sort(ranks)
	out := make([][]*Step, 0, len(ranks))
	for _, r := range ranks {
		out = append(out, byRank[r])
	}
	return out
}

// order orders steps for applying: by levels, or by relatedLevels when
// any step has a relation (relate).
func (rc *Reconciler) order(steps []*Step, related bool) [][]*Step {
	if related {
		return relatedLevels(steps)
	}
	return levels(steps)
}

// relatedLevels orders steps for applying as levels does, and also after
// everything each depends on (relate), and after its declared parent
// directory (which the relations may have moved later). A step's level
// is the highest of its kind's place in levels' order and one past each
// of those it waits for; removals follow every creation, in levels'
// order. A cycle, which admission refuses, is broken where it is met
// rather than looped on.
func relatedLevels(steps []*Step) [][]*Step {
	var creations, removals []*Step
	for _, s := range steps {
		if s.Spec == nil {
			removals = append(removals, s)
		} else {
			creations = append(creations, s)
		}
	}
	base := make(map[*Step]int, len(creations))
	for i, level := range levels(creations) {
		for _, s := range level {
			base[s] = i
		}
	}
	dirs := make(map[string]*Step)
	for _, s := range creations {
		switch s.Spec.(type) {
		case *drivers.DirectorySpec, *drivers.ArchiveSpec:
			dirs[s.Spec.Key()] = s
		}
	}
	parent := func(s *Step) *Step {
		switch s.Spec.(type) {
		case *drivers.FileSpec, *drivers.DirectorySpec, *drivers.ArchiveSpec:
			return dirs[path.Dir(s.Spec.Key())]
		}
		return nil
	}
	const onPath = -1
	level := make(map[*Step]int, len(creations))
	var visit func(s *Step) int
	visit = func(s *Step) int {
		if l, seen := level[s]; seen {
			return l
		}
		level[s] = onPath
		l := base[s]
		waits := s.deps
		if p := parent(s); p != nil && p != s {
			waits = append(slices.Clip(waits), p)
		}
		for _, d := range waits {
			if dl := visit(d); dl != onPath {
				l = max(l, dl+1)
			}
		}
		level[s] = l
		return l
	}
	top := 0
	for _, s := range creations {
		top = max(top, visit(s))
	}
	out := make([][]*Step, top+1)
	for _, s := range creations {
		l := max(level[s], 0)
		out[l] = append(out[l], s)
	}
	out = slices.DeleteFunc(out, func(l []*Step) bool { return len(l) == 0 })
	return append(out, levels(removals)...)
}
