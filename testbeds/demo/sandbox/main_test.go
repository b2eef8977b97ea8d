package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/testbeds"
)

// TestUpAndDown runs the README's main job as a person would, then stops
// it: the example declaration is applied in the sandbox root, the output
// says what to run next, and down leaves no service running. Up again
// works after a release (which stores a newer revision); an
// address taken fails the up and leaves nothing running; reset removes
// the sandbox.
func TestUpAndDown(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs both programs; skipped with -short")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	releases := l.Addr().String()
	l.Close()
	dir := filepath.Join(t.TempDir(), "sandbox")
	var out, errb bytes.Buffer
	up := []string{"--dir", dir, "--listen", addr, "--releases-listen", releases, "--declaration", "../../../examples/sandbox.yaml"}
	if code := Main(up, &out, &errb); code != 0 {
		t.Fatalf("demo up: exit %d\n%s%s", code, out.String(), errb.String())
	}
	t.Cleanup(func() { Main([]string{"--dir", dir, "down"}, &out, &errb) })
	for _, want := range []string{"sandbox accepted revision 1", "converged", "the version just installed", "nodes", "journal sandbox --why file:/etc/motd", "demo --dir " + dir + " down"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo up did not say %q:\n%s", want, out.String())
		}
	}
	motd, err := os.ReadFile(filepath.Join(dir, "root/etc/motd"))
	if err != nil || !strings.Contains(string(motd), "held by mesh-host") {
		t.Errorf("sandbox/root/etc/motd: %q, %v", motd, err)
	}
	pids := readPids(t, dir)
	// The README's release step: the host's next version, delivered by
	// meshctl release (which raises the node's revision to 2), runs; then
	// down and up again: the node keeps revision 2, and up succeeds.
	rel, err := testbeds.Pack(filepath.Join(dir, "bin", "mesh-host"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	meshctl := filepath.Join(dir, "bin", "meshctl")
	if b, err := exec.Command(meshctl, "--data", filepath.Join(dir, "control"), "release", rel.Path, "--nodes", "sandbox", "--wait", "90s").CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "sandbox runs release") {
		t.Fatalf("release: %v\n%s", err, b)
	}
	if code := Main([]string{"--dir", dir, "down"}, &out, &errb); code != 0 {
		t.Fatalf("demo down: exit %d\n%s", code, errb.String())
	}
	stopped(t, pids)
	out.Reset()
	if code := Main(up, &out, &errb); code != 0 {
		t.Fatalf("demo up again, after a newer revision was stored: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "sandbox keeps its stored declaration, revision 2") {
		t.Errorf("up again did not say the node keeps revision 2:\n%s", out.String())
	}
	// The node runs the release, not the build up installed again: up
	// says so rather than leave install.sh's line as the last word.
	if want := rel.Version()[:12] + ", not the "; !strings.Contains(out.String(), want) {
		t.Errorf("up again did not say the node runs the release (%q):\n%s", want, out.String())
	}
	// The node is listed, at revision 2.
	if b, err := exec.Command(meshctl, "--data", filepath.Join(dir, "control"), "nodes").CombinedOutput(); err != nil || !strings.Contains(string(b), "sandbox") {
		t.Errorf("nodes after up again: %v\n%s", err, b)
	}
	pids = readPids(t, dir)

	// An address taken is an error before anything starts, and the
	// services of the up before are stopped, not left running.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out.Reset()
	errb.Reset()
	clash := append(append([]string{}, up...), "--releases-listen", taken.Addr().String())
	if code := Main(clash, &out, &errb); code == 0 || !strings.Contains(errb.String(), "pass --releases-listen") {
		t.Errorf("demo up with its releases address taken: exit %d\n%s", code, errb.String())
	}
	stopped(t, pids)

	// Reset stops everything and removes the sandbox.
	if code := Main(up, &out, &errb); code != 0 {
		t.Fatalf("demo up after the clash: exit %d\n%s%s", code, out.String(), errb.String())
	}
	pids = readPids(t, dir)
	if code := Main([]string{"--dir", dir, "reset"}, &out, &errb); code != 0 {
		t.Fatalf("demo reset: exit %d\n%s", code, errb.String())
	}
	stopped(t, pids)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the sandbox is still there after reset: %v", err)
	}
}

func readPids(t *testing.T, dir string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, name := range []string{"mesh-host", "meshctl"} {
		b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
		if err != nil {
			t.Fatalf("no pid file for %s: %v", name, err)
		}
		if pids[name], err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
			t.Fatal(err)
		}
	}
	return pids
}

func stopped(t *testing.T, pids map[string]int) {
	t.Helper()
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs", name, pid)
		}
	}
}
