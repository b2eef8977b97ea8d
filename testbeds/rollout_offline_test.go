package testbeds_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// A canary stopped just before its rollout (its last heartbeat fresh) does
// not answer the push: it is deferred, not waited for, and the rollout
// completes the other waves, naming it outstanding. Back, it takes the
// revision with its hello and status says it converged. With --offline
// fail the same stop halts the rollout.
func TestRolloutDefersAStoppedNode(t *testing.T) {
	bed := beds(t)
	hosts := webFleet(t, bed, 3)
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v1 ${node}\\n\"}\n", "--select", "role=web")
	bed.MustMeshctl("rollout", "--select", "role=web", "--wait-healthy", "60s")

	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v2 ${node}\\n\"}\n", "--select", "role=web")
	hosts[0].Stop()
	start := time.Now()
	out := bed.MustMeshctl("rollout", "--select", "role=web", "--canary", "1", "--wait-healthy", "60s")
	if took := time.Since(start); took > 50*time.Second {
		t.Errorf("the rollout took %v: it waited for the stopped canary", took)
	}
	for _, want := range []string{"wave 0: web-1 deferred revision 2: offline when its wave started: offline, the host is stopping", "wave 1: web-2 converged", "wave 1: web-3 converged",
		"done: 2 converged, 0 unchanged, 0 failed, 1 deferred (outstanding: web-1)"} {
		if !strings.Contains(out, want) {
			t.Errorf("rollout lacks %q:\n%s", want, out)
		}
	}
	for _, h := range hosts[1:] {
		if got, want := content(t, h, "etc/motd"), "v2 "+h.Name+"\n"; got != want {
			t.Errorf("%s motd %q, want %q", h.Name, got, want)
		}
	}
	status := bed.MustMeshctl("rollout", "status")
	if !strings.Contains(status, "deferred web-1 (wave 0, revision 2): offline when its wave started: offline, the host is stopping") {
		t.Errorf("status does not list web-1 deferred:\n%s", status)
	}

	// Back: its hello takes revision 2, and status says so.
	hosts[0].Start()
	testbeds.Eventually(t, 60*time.Second, "web-1 converges revision 2", func() error {
		if got := content(t, hosts[0], "etc/motd"); got != "v2 web-1\n" {
			return fmt.Errorf("motd %q", got)
		}
		if st := bed.MustMeshctl("rollout", "status"); !strings.Contains(st, "web-1 converged to revision 2 (") {
			return fmt.Errorf("status:\n%s", st)
		}
		return nil
	})

	// --offline fail: the same stop halts at the canary, declaring it
	// nothing.
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v3 ${node}\\n\"}\n", "--select", "role=web")
	hosts[0].Stop()
	r := bed.Meshctl("rollout", "--select", "role=web", "--canary", "1", "--wait-healthy", "60s", "--offline", "fail")
	if r.Code != 1 || !strings.Contains(r.Stderr, "halted: canary web-1 failed in wave 0: offline") {
		t.Fatalf("rollout --offline fail past a stopped canary: %s", r)
	}
	for _, n := range rolloutStatus(t, bed).Nodes {
		if n.Node != "web-1" && n.Step != "pending" {
			t.Errorf("%s is %s after the canary failed offline; want pending", n.Node, n.Step)
		}
	}
}

// A rollout halted by a canary that failed its revision resumes once the
// canary converged it: status says what changed since the halt, and
// resume finishes the rollout.
func TestHaltedRolloutResumesOnceItsCanaryConverged(t *testing.T) {
	bed := beds(t)
	hosts := webFleet(t, bed, 2)
	// The canary cannot take it: /etc/app.conf is a directory there.
	in := filepath.Join(hosts[0].Root, "etc/app.conf/in-the-way")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	writeProfile(t, bed, "app", "resources:\n  - file: {path: /etc/app.conf, content: \"x\\n\"}\n", "--select", "role=web")
	r := bed.Meshctl("rollout", "--select", "role=web", "--canary", "1", "--wait-healthy", "60s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "halted: canary web-1 failed in wave 0") {
		t.Fatalf("rollout past a failing canary: %s", r)
	}
	if r := bed.Meshctl("rollout", "resume"); r.Code != 2 || !strings.Contains(r.Stderr, "web-1 has not converged revision 1 since") {
		t.Errorf("resume before the canary converged: %s", r)
	}

	// The operator clears the way; the host's check converges it.
	if err := os.RemoveAll(filepath.Dir(in)); err != nil {
		t.Fatal(err)
	}
	testbeds.Eventually(t, 60*time.Second, "status says web-1 converged since the halt", func() error {
		hosts[0].Run("check")
		st := bed.MustMeshctl("rollout", "status")
		if !strings.Contains(st, "since the halt at ") || !strings.Contains(st, ": web-1 converged to revision 1 (") {
			return fmt.Errorf("status:\n%s", st)
		}
		return nil
	})
	out := bed.MustMeshctl("rollout", "resume")
	if !strings.Contains(out, "done: 2 converged, 0 unchanged, 0 failed") {
		t.Fatalf("resume:\n%s", out)
	}
	if got := content(t, hosts[1], "etc/app.conf"); got != "x\n" {
		t.Errorf("web-2 app.conf %q after the resume", got)
	}
}
