package agent

import (
	"path"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
)

// This file is the order in which a reconcile applies its steps: in
// levels, each applied (and its outcomes journaled) before the next acts.

// order orders steps for applying: by levels, or by relatedLevels when
// any step has a relation (relate).
func (rc *Reconciler) order(steps []*Step, related bool) [][]*Step {
	if related {
		return rc.relatedLevels(steps)
	}
	return levels(steps)
}

// levels orders steps for applying by their rank: groups, then users (a
// file's owner may be a user declared beside it), directories shallow to
// deep, then packages, then files and archives, then execs (a migration
// after the release it runs), then units; removals in the reverse order
// (units, files and archives, packages, directories deep to shallow,
// users, groups), after everything created, since a removed directory
// must first lose the files the host owned in it.
func levels(steps []*Step) [][]*Step {
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

// rank is the place of s in levels' order. It names kinds: the order is
// between kinds, what one kind's resources need of another's (a file's
// owner, a unit's files and packages), which no driver can say, since
// each knows only its own kind. A declaration says more with relations
// (relatedLevels).
func rank(s *Step) int {
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

// relatedLevels orders steps for applying as levels does, and also after
// everything each depends on (relate), and, when its driver creates no
// parents (drivers.Nested), after the directory declared at its parent
// (which the relations may have moved later). A step's level
// is the highest of its kind's place in levels' order and one past each
// of those it waits for; removals follow every creation, in levels'
// order. A cycle, which admission refuses, is broken where it is met
// rather than looped on.
func (rc *Reconciler) relatedLevels(steps []*Step) [][]*Step {
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
	dirs := make(map[string]*Step) // the directories declared, by path
	for _, s := range creations {
		if n := rc.nested(s); n != nil && n.IsDirectory(s.Spec) {
			dirs[n.PathOf(s.Spec)] = s
		}
	}
	parent := func(s *Step) *Step {
		if n := rc.nested(s); n != nil {
			return dirs[path.Dir(n.PathOf(s.Spec))]
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
