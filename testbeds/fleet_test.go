package testbeds_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

var fleetRunner = sync.OnceValues(func() (string, error) {
	return testbeds.BuildFleetRunner(filepath.Dir(bins.MeshHost), "bed")
})

// runner builds the many-hosts runner once for the package's tests.
func runner(tb testing.TB) string {
	tb.Helper()
	path, err := fleetRunner()
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// waitSummary waits until `meshctl nodes --summary` prints want, asking
// no more than once a second: over a big fleet the question is work for
// the control service, which would slow what it waits for.
func waitSummary(tb testing.TB, bed *testbeds.Bed, timeout time.Duration, want string) {
	tb.Helper()
	testbeds.Eventually(tb, timeout, "meshctl nodes --summary: "+want, func() error {
		start := time.Now()
		r := bed.Meshctl("nodes", "--summary")
		if got := strings.TrimSpace(r.Stdout); got != want {
			time.Sleep(time.Second - time.Since(start))
			return fmt.Errorf("got %q (%s)", got, strings.TrimSpace(r.Stderr))
		}
		return nil
	})
}

// TestFleetRunnerHostsAreNodes: hosts run many to a process are nodes
// like any other, each with its own journal and credentials: linked,
// reporting, and applying what is declared for it alone.
func TestFleetRunnerHostsAreNodes(t *testing.T) {
	bed := beds(t)
	f := bed.StartFleet(runner(t), 12, testbeds.FleetOptions{PerProcess: 5})
	if got := len(f.PIDs()); got != 3 {
		t.Fatalf("got %d runner processes for 12 hosts 5 a process, want 3", got)
	}
	waitSummary(t, bed, time.Minute, "12 nodes: 12 ok; versions: 12 bed")

	keys := map[string]string{}
	for _, n := range f.Nodes {
		if _, err := os.Stat(filepath.Join(f.Dir, n, "state", "journal.db")); err != nil {
			t.Errorf("%s has no journal of its own: %v", n, err)
		}
		creds, err := os.ReadFile(filepath.Join(f.Dir, n, "state", "node.creds"))
		if err != nil {
			t.Fatalf("%s's credentials: %v", n, err)
		}
		if other, ok := keys[string(creds)]; ok {
			t.Errorf("%s and %s have the same credentials", n, other)
		}
		keys[string(creds)] = n
	}

	node := f.Nodes[7]
	bed.MustMeshctl("declare", node, bed.Declare(node, 1, testbeds.Files{"/etc/fleet.conf": "seven\n"}))
	testbeds.Eventually(t, 30*time.Second, node+" applies its declaration", func() error {
		b, err := os.ReadFile(filepath.Join(f.Dir, node, "root", "etc", "fleet.conf"))
		if err != nil || string(b) != "seven\n" {
			return fmt.Errorf("fleet.conf: %q, %v", b, err)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(f.Dir, f.Nodes[6], "root", "etc", "fleet.conf")); err == nil {
		t.Errorf("%s applied %s's declaration", f.Nodes[6], node)
	}
	waitSummary(t, bed, 30*time.Second, "12 nodes: 12 ok; versions: 12 bed")
}
