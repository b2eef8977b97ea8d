package client

import (
	"time"

	"github.com/mesh-host/mesh-host/linkproto"
)

// reachable says a node in state (stateOf) may answer a push now: heard
// within its silent deadline and not known to be gone. Every other state
// (silent, never heard, unreadable, revoked, expired, and any state added
// for a node known to be down) is offline to a rollout.
func reachable(state string) bool {
	switch state {
	case StateOK, StateBehind, StateFailed, StateRolledBack:
		return true
	}
	return false
}

// offlineState is node's state when hb, its latest heartbeat, says it is
// offline at now, with the reason `meshctl nodes` gives for it ("offline,
// the host is stopping (…)"); "" when it may be reachable. A node never
// heard is pushed to: whether it answers says whether it is there.
func offlineState(node string, hb *linkproto.Heartbeat, now time.Time) string {
	if hb == nil {
		return ""
	}
	s := NodeStatus{Node: node, Heartbeat: hb}
	if s.State = stateOf(s, now); reachable(s.State) {
		return ""
	}
	why := reasonOf(s, now)
	if s.State == StateLocal {
		why = localReason(hb.Local, now)
	}
	if why == "" {
		return s.State
	}
	return s.State + ", " + why
}
