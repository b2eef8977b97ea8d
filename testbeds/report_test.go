package testbeds_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// TestNodeReportsItsLastGoodState: a node whose revision 3 fails keeps
// its last good revision 2 and says so, upward: meshctl nodes shows it
// failed with the reason, meshctl status shows the node's own projection
// (last good 2, behind, what failed), and meshctl replay --verify rebuilds
// that projection from the node's records in the events stream and finds
// it equal, after the failure and after a drift and its repair.
func TestNodeReportsItsLastGoodState(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	h.Start()
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/motd": "one\n"}))
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 2, testbeds.Files{"/etc/motd": "two\n", "/etc/issue": "two\n"}))
	// Revision 3: one file owned by a user the machine does not have.
	bad := "  - file: {path: /etc/app.conf, content: \"x\\n\", owner: nosuchuser}\n"
	r := b.Meshctl("declare", "web-1", b.Declare("web-1", 3, testbeds.Files{"/etc/motd": "three\n", "/etc/issue": "two\n"}, bad))
	t.Logf("declare 3: %s", r)

	testbeds.Eventually(t, 30*time.Second, "nodes shows web-1 failed, with the last good revision", func() error {
		out := b.MustMeshctl("nodes")
		if !strings.Contains(out, "failed: last good 2, desired 3: 1 failed") {
			return fmt.Errorf("nodes:\n%s", out)
		}
		return nil
	})
	testbeds.Eventually(t, 30*time.Second, "status shows the node's report", func() error {
		r := b.Meshctl("status", "web-1")
		for _, want := range []string{"last good       revision 2", "behind          last good 2, desired 3: 1 failed",
			"file:/etc/app.conf", "never applied", "nosuchuser", "the latest: its last heartbeat names it"} {
			if !strings.Contains(r.Stdout, want) {
				return fmt.Errorf("status does not say %q:\n%s", want, r)
			}
		}
		return nil
	})
	verified(t, b, "after the failure")

	// Drift, found and repaired by a check on the node.
	if err := os.WriteFile(filepath.Join(h.Root, "etc/issue"), []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// (It exits 1: revision 3's failing file still fails.)
	if r := h.Run("check"); !strings.Contains(r.Stdout, "1 drifted, 1 changed") {
		t.Fatalf("check: %s", r)
	}
	verified(t, b, "after a drift and its repair")

	// A node that reported nothing is refused by name; a name the mesh
	// never knew is said to be unknown (a typo, most likely).
	b.MustMeshctl("declare", "--force", "web-2", b.Declare("web-2", 1, testbeds.Files{"/etc/motd": "one\n"}))
	if r := b.Meshctl("status", "web-2"); r.Code == 0 || !strings.Contains(r.Stderr, "no report from web-2") {
		t.Errorf("status of a node that never reported: %s", r)
	}
	if r := b.Meshctl("status", "nosuchnode"); r.Code == 0 || !strings.Contains(r.Stderr, "unknown node: mesh home has no node nosuchnode") {
		t.Errorf("status of a node the mesh never knew: %s", r)
	}
}

// verified waits until meshctl replay --verify agrees with the node's
// latest report (the node's records and its report travel apart).
func verified(t *testing.T, b *testbeds.Bed, when string) {
	t.Helper()
	testbeds.Eventually(t, 30*time.Second, "replay --verify agrees "+when, func() error {
		r := b.Meshctl("replay", "web-1", "--verify")
		if r.Code != 0 || !strings.Contains(r.Stdout, "matches what web-1 reported") {
			return errors.New(r.String())
		}
		return nil
	})
}
