package agent

import (
	"fmt"
	"slices"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
)

// Skipped is the outcome of a declared resource the reconcile did not
// apply because one it depends on failed or was skipped: journaled as a
// resource.skipped naming that resource, never as a resource.applied.
const Skipped event.Action = "skipped"

// relate links the declared steps by their specs' relations
// (drivers.Relations): each step's deps, applied before it (what it
// requires, subscribes to or is notified by), and the steps it notifies
// (what it subscribes to notifies it). It reports whether any step has a
// relation: without one, the reconcile orders by kind alone (levels),
// at no cost. An ID that names no declared step is ignored:
// admission refuses such a declaration, and a reconcile does not stop
// for one.
func relate(steps []*Step) bool {
	var byID map[string]*Step
	related := false
	for _, s := range steps {
		rel := drivers.RelationsOf(s.Spec)
		if rel == nil {
			continue
		}
		if byID == nil {
			byID = make(map[string]*Step, len(steps))
			for _, s := range steps {
				if s.Spec != nil {
					byID[s.ID] = s
				}
			}
		}
		related = true
		for _, id := range rel.Requires {
			if d := byID[id]; d != nil && d != s {
				s.deps = appendOnce(s.deps, d)
			}
		}
		for _, id := range rel.Subscribe {
			if src := byID[id]; src != nil && src != s {
				s.deps = appendOnce(s.deps, src)
				src.notifies = appendOnce(src.notifies, s)
			}
		}
		for _, id := range rel.Notify {
			if t := byID[id]; t != nil && t != s {
				t.deps = appendOnce(t.deps, s)
				s.notifies = appendOnce(s.notifies, t)
			}
		}
	}
	return related
}

func appendOnce(list []*Step, s *Step) []*Step {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}

// failedDep returns the first step s depends on that failed or was
// skipped in this reconcile; nil when none did.
func failedDep(s *Step) *Step {
	for _, d := range s.deps {
		if d.Outcome == event.ActionFailed || d.Outcome == Skipped {
			return d
		}
	}
	return nil
}

// skip makes s skipped because dep failed or was skipped.
func (s *Step) skip(dep *Step) {
	s.Outcome, s.SkippedFor, s.Err = Skipped, dep.ID, nil
	how := "failed"
	if dep.Outcome == Skipped {
		how = "was skipped"
	}
	s.Note = fmt.Sprintf("skipped: %s %s", dep.ID, how)
}
