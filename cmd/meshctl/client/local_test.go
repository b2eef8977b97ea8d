package client

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// TestNodesLocal: a node whose heartbeat carries a local override is in
// state local, its reason naming the revision, the file, the user and
// its age; silence comes first. A heartbeat whose override holds what no
// host would say is unreadable, not shown.
func TestNodesLocal(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := b.client(now)
	for _, node := range []string{"local", "silent", "hostile"} {
		if err := c.Declare(ctx, &bytes.Buffer{}, node, decl(t, node, 1, "x"), DeclareOptions{PushTimeout: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	minute := linkproto.Duration(time.Minute)
	local := &linkproto.LocalReport{Revision: 2, MeshRevision: 1, Source: "file:/srv/x.yaml", User: "alice", Since: now.Add(-5 * time.Minute)}
	b.node("local").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now, Interval: minute, Desired: 2, Applied: 2, Result: event.ResultConverged, Local: local})
	b.node("silent").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now.Add(-time.Hour), Interval: minute, Desired: 2, Applied: 2, Local: local})
	hostile := *local
	hostile.Source = "file:/x\x1b]0;pwned\x07"
	b.node("hostile").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now, Interval: minute, Desired: 2, Applied: 2, Local: &hostile})

	var nodes []NodeStatus
	basetest.Eventually(t, 5*time.Second, func() error {
		var err error
		if nodes, err = c.Nodes(ctx); err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Heartbeat == nil && n.Problem == "" {
				return fmt.Errorf("%s not heard yet", n.Node)
			}
		}
		return nil
	})
	want := map[string]string{"local": StateLocal, "silent": StateSilent, "hostile": StateUnreadable}
	for _, n := range nodes {
		if n.State != want[n.Node] {
			t.Errorf("%s: state %q, want %q (%s)", n.Node, n.State, want[n.Node], n.Problem)
		}
		if n.Node == "local" && n.Reason != "local revision 2 from file:/srv/x.yaml by alice since 5m0s ago (reclaim: meshctl declare NODE FILE --reclaim)" {
			t.Errorf("local: reason %q", n.Reason)
		}
		if n.Node == "hostile" && !strings.Contains(n.Problem, "not printable") {
			t.Errorf("hostile: problem %q", n.Problem)
		}
	}
}
