package client

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Offline and disconnected come from the last heartbeat and the presence
// the broker told; a newer heartbeat or connection clears them.
func TestOfflineAndDisconnected(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	heard := now.Add(-10 * time.Second)
	beat := func(stopping string) *linkproto.Heartbeat {
		return &linkproto.Heartbeat{Sent: heard, Interval: linkproto.Duration(time.Minute), Stopping: stopping}
	}
	presence := func(connected bool, at time.Time) *store.Presence {
		return &store.Presence{Node: "web1", Connected: connected, At: at, Reason: "Client Closed"}
	}
	for _, tc := range []struct {
		name     string
		hb       *linkproto.Heartbeat
		presence *store.Presence
		want     string
		reason   string
	}{
		{"heard", beat(""), nil, StateOK, ""},
		{"stopped", beat("the host is stopping"), nil, StateOffline, "the host is stopping (10s ago, at 2026-12-05T11:59:50Z)"},
		{"stopped, then its connection closed", beat("the host is stopping"), presence(false, heard.Add(time.Second)), StateOffline, "the host is stopping"},
		{"stopped, then connected again", beat("the host is stopping"), presence(true, heard.Add(time.Second)), StateOK, ""},
		{"closed", beat(""), presence(false, heard.Add(time.Second)), StateDisconnected, "its connection closed 9s ago, at 2026-12-05T11:59:51Z: Client Closed"},
		{"closed, then heard", beat(""), presence(false, heard.Add(-time.Second)), StateOK, ""},
		{"connected", beat(""), presence(true, heard.Add(time.Second)), StateOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NodeStatus{Node: "web1", Heartbeat: tc.hb, Heard: heard, Presence: tc.presence}
			s.State = stateOf(s, now)
			s.Reason = reasonOf(s, now)
			if s.State != tc.want || !strings.HasPrefix(s.Reason, tc.reason) {
				t.Errorf("got %s (%s), want %s (%s)", s.State, s.Reason, tc.want, tc.reason)
			}
			if Unreachable(s.State) != (tc.want == StateOffline || tc.want == StateDisconnected) {
				t.Errorf("Unreachable(%s) = %v", s.State, Unreachable(s.State))
			}
		})
	}
}

// What a node says of its stopping is cut to the bound, and only
// printable characters are kept.
func TestStoppingIsFit(t *testing.T) {
	hb, err := decodeHeartbeat(linkproto.Marshal(linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion,
		Stopping: "bye\x1b[2J\n" + strings.Repeat("é", linkproto.MaxStoppingBytes)}))
	if err != nil {
		t.Fatal(err)
	}
	if got := hb.Stopping; len(got) > linkproto.MaxStoppingBytes || strings.ContainsAny(got, "\x1b\n") || !strings.HasPrefix(got, "bye[2J") {
		t.Errorf("stopping as decoded: %q (%d bytes)", got, len(got))
	}
}
