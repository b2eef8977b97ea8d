package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUpAndDown runs the README's main job as a person would, then stops
// it: the example declaration is applied in the sandbox root, the output
// says what to run next, and down leaves no service running.
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
	dir := filepath.Join(t.TempDir(), "sandbox")
	var out, errb bytes.Buffer
	up := []string{"--dir", dir, "--listen", addr, "--declaration", "../../examples/sandbox.yaml"}
	if code := Main(up, &out, &errb); code != 0 {
		t.Fatalf("demo up: exit %d\n%s%s", code, out.String(), errb.String())
	}
	t.Cleanup(func() { Main([]string{"--dir", dir, "down"}, &out, &errb) })
	for _, want := range []string{"sandbox accepted revision 1", "converged", "nodes", "journal sandbox --why file:/etc/motd", "demo --dir " + dir + " down"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo up did not say %q:\n%s", want, out.String())
		}
	}
	motd, err := os.ReadFile(filepath.Join(dir, "root/etc/motd"))
	if err != nil || !strings.Contains(string(motd), "held by mesh-host") {
		t.Errorf("sandbox/root/etc/motd: %q, %v", motd, err)
	}
	pids := map[string][]byte{}
	for _, name := range []string{"mesh-host", "meshctl"} {
		if pids[name], err = os.ReadFile(filepath.Join(dir, name+".pid")); err != nil {
			t.Fatalf("no pid file for %s: %v", name, err)
		}
	}
	out.Reset()
	if code := Main([]string{"--dir", dir, "down"}, &out, &errb); code != 0 {
		t.Fatalf("demo down: exit %d\n%s", code, errb.String())
	}
	for name, b := range pids {
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if alive(pid) {
			t.Errorf("%s (pid %d) still runs after down", name, pid)
		}
	}
}
