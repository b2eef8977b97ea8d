package account

import (
	"fmt"
	"slices"
)

// span is a range of ids, both ends included.
type span struct{ lo, hi int }

// The ranges new accounts take their ids from, as Debian's login.defs
// and adduser.conf set them: system accounts below 1000, users from 1000
// to 59999 (60000 and above are left to containers' subordinate ids and
// to nobody, 65534).
var (
	systemSpan = span{100, 999}
	userSpan   = span{1000, 59999}
)

func spanFor(system bool) span {
	if system {
		return systemSpan
	}
	return userSpan
}

// allocate picks a new id of kind ("uid" or "gid") for name, as
// shadow-utils' find_new_uid does, with the host's memory added: an id
// is taken when a line of the files holds it (inUse) or Reserved says
// another name held it.
//
// In order: an id of the span that Reserved says name itself held, when
// no line holds it, so that what the name left on disk is its own again;
// then prefer (a user's uid, for the gid of the group it makes), when it
// is not taken; then, for a user, the id after the highest taken in the
// span, and for a system account the id before the lowest, so that an id
// freed by a removal the host never knew of (a userdel by hand) is not
// given out again while there is room beyond; then the first id not
// taken, searched upward for a user and downward from the top for a
// system account.
func (db *database) allocate(kind, name string, system bool, inUse map[int]string, prefer int) (int, error) {
	sp := spanFor(system)
	reserved := db.opts.Reserved
	// One pass over the span, one question to Reserved an id.
	heldBy := func(id int) (string, bool) {
		if reserved == nil {
			return "", false
		}
		return reserved(kind, id)
	}
	takenIn := make([]bool, sp.hi-sp.lo+1)
	own := -1
	for id := sp.lo; id <= sp.hi; id++ {
		_, used := inUse[id]
		holder, held := heldBy(id)
		if held && holder == name && !used && own < 0 {
			own = id
		}
		takenIn[id-sp.lo] = used || held && holder != name
	}
	taken := func(id int) bool {
		if id >= sp.lo && id <= sp.hi {
			return takenIn[id-sp.lo]
		}
		_, used := inUse[id]
		holder, held := heldBy(id)
		return used || held && holder != name
	}
	switch {
	case own >= 0:
		return own, nil
	case prefer >= 0 && !taken(prefer):
		return prefer, nil
	}
	if system {
		next := sp.hi
		if lowest := slices.Index(takenIn, true); lowest >= 0 {
			next = sp.lo + lowest - 1
		}
		if next >= sp.lo {
			return next, nil
		}
		for id := sp.hi; id >= sp.lo; id-- {
			if !taken(id) {
				return id, nil
			}
		}
	} else {
		next := sp.lo
		for id := sp.hi; id >= sp.lo; id-- {
			if taken(id) {
				next = id + 1
				break
			}
		}
		if next <= sp.hi {
			return next, nil
		}
		if first := slices.Index(takenIn, false); first >= 0 {
			return sp.lo + first, nil
		}
	}
	return 0, fmt.Errorf("%w: every %s from %d to %d is in use or held by another name", ErrNoFreeID, kind, sp.lo, sp.hi)
}
