package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// TestSIGTERMFinishesTheStartReconcile: `mesh-host serve` sent SIGTERM while
// its start reconcile is applying finishes that apply, journals it, and
// exits 0, leaving nothing pending.
func TestSIGTERMFinishesTheStartReconcile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service as a process; skipped with -short")
	}
	bin := binary(t)
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	decl := filepath.Join(dir, "decl.yaml")
	writeFilesDeclaration(t, decl, n)
	global := []string{"--root", root, "--state-dir", state}
	mesh := func(args ...string) []byte {
		t.Helper()
		out, err := exec.Command(bin, append(global, args...)...).Output()
		if err != nil {
			t.Fatalf("mesh-host %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	mesh("apply", decl)
	// Undo the apply behind the host's back: its start reconcile repairs it.
	if err := os.RemoveAll(filepath.Join(root, "etc/app")); err != nil {
		t.Fatal(err)
	}

	var stderr bytes.Buffer
	serve := exec.Command(bin, append(global, "serve", "--drift-interval", "1h")...)
	serve.Stderr = &stderr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Through the service's socket, once it is there (without it the
		// command would wait for the journal's lock).
		if _, err := os.Stat(filepath.Join(state, "control.sock")); err != nil {
			if time.Now().After(deadline) {
				serve.Process.Kill()
				t.Fatalf("no socket; the service said:\n%s", stderr.String())
			}
			time.Sleep(time.Millisecond)
			continue
		}
		out, _ := exec.Command(bin, append(global, "journal", "--kind", string(event.ReconcileStarted), "--json")...).Output()
		if bytes.Contains(out, []byte(`"trigger":"start"`)) {
			break
		}
		if time.Now().After(deadline) {
			serve.Process.Kill()
			t.Fatalf("no start reconcile; the service said:\n%s", stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	signalled := time.Now()
	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("serve on SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		serve.Process.Kill()
		t.Fatalf("serve did not stop on SIGTERM:\n%s", stderr.String())
	}

	var st struct {
		State projector.State `json:"state"`
	}
	if err := json.Unmarshal(mesh("status", "--json"), &st); err != nil {
		t.Fatal(err)
	}
	r := st.State.LastReconcile
	if st.State.Pending != nil || r == nil || r.Trigger != event.TriggerStart || r.Result != event.ResultConverged || r.Changed != n+1 {
		t.Fatalf("after SIGTERM: pending %+v, last reconcile %+v", st.State.Pending, r)
	}
	files, _ := filepath.Glob(filepath.Join(root, "etc/app/f*.conf"))
	if len(files) != n {
		t.Errorf("%d of %d files in place", len(files), n)
	}
	if !r.Completed.After(signalled) {
		t.Logf("the reconcile completed (%s) before the signal (%s): nothing was in flight to finish", r.Completed, signalled)
	}
}
