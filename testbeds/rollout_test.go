package testbeds_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// rolloutRecord is what `meshctl rollout status --json` says, as far as
// these tests look.
type rolloutRecord struct {
	ID     string `json:"id"`
	State  string `json:"state"`
	Reason string `json:"reason"`
	Holder string `json:"holder"`
	Nodes  []struct {
		Node     string `json:"node"`
		Wave     int    `json:"wave"`
		Step     string `json:"step"`
		Revision uint64 `json:"revision"`
		LastGood uint64 `json:"last_good"`
	} `json:"nodes"`
}

func rolloutStatus(t *testing.T, bed *testbeds.Bed) rolloutRecord {
	t.Helper()
	var r rolloutRecord
	out := bed.MustMeshctl("rollout", "status", "--json")
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("rollout status --json: %v\n%s", err, out)
	}
	return r
}

// webFleet is n started hosts labelled role=web, web-1 labelled canary.
func webFleet(t *testing.T, bed *testbeds.Bed, n int) []*testbeds.Host {
	var hosts []*testbeds.Host
	for i := 1; i <= n; i++ {
		h := bed.AddHost(fmt.Sprintf("web-%d", i))
		h.Start()
		labels := []string{"label", h.Name, "role=web"}
		if i == 1 {
			labels = append(labels, "canary=yes")
		}
		bed.MustMeshctl(labels...)
		hosts = append(hosts, h)
	}
	return hosts
}

func writeProfile(t *testing.T, bed *testbeds.Bed, name, source string, args ...string) {
	t.Helper()
	file := filepath.Join(bed.Dir, name+".yaml")
	if err := os.WriteFile(file, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	bed.MustMeshctl(append([]string{"profile", "set", name, file}, args...)...)
}

func content(t *testing.T, h *testbeds.Host, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.Root, path))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

// A rollout converges the fleet wave by wave; a failing canary halts the
// next one before any other node changes; abort --revert brings the
// canary back to what it had converged before.
func TestRolloutCanaryHaltsAndRevertRestores(t *testing.T) {
	bed := testbeds.New(t, bins)
	hosts := webFleet(t, bed, 4)
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v1 ${node}\\n\"}\n", "--select", "role=web")

	out := bed.MustMeshctl("rollout", "--select", "role=web", "--canary", "1", "--max-in-flight", "2", "--wait-healthy", "30s")
	if !strings.Contains(out, "to 4 nodes in 3 waves (canary 1, then 2 at a time)") || !strings.Contains(out, "done: 4 converged") {
		t.Fatalf("rollout:\n%s", out)
	}
	// The canary went first, alone.
	if !strings.Contains(out, "wave 0: web-1 converged") || strings.Contains(out, "wave 0: web-2") {
		t.Errorf("web-1 is not the lone canary:\n%s", out)
	}
	for _, h := range hosts {
		if got, want := content(t, h, "etc/motd"), "v1 "+h.Name+"\n"; got != want {
			t.Errorf("%s motd %q, want %q", h.Name, got, want)
		}
	}

	// The canary cannot take the next version: /etc/app.conf is a
	// directory there.
	if err := os.MkdirAll(filepath.Join(hosts[0].Root, "etc/app.conf/in-the-way"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v2 ${node}\\n\"}\n  - file: {path: /etc/app.conf, content: \"x\\n\"}\n", "--select", "role=web")
	// The fleet's dry run plans what the profiles render now: each node's
	// motd differs, so each node's plan is its own, with its diff; and
	// it gates: the canary's failure is foreseen, in the apply's words.
	pr := bed.Meshctl("plan", "--select", "role=web")
	plan := pr.Stdout
	for _, want := range []string{"1 node: 2 to change, 0 unchanged\n  web-2\n", "created     file:/etc/app.conf", "differs: content", "    -v1 web-3\n    +v2 web-3\n",
		"file /etc/app.conf: not a regular file: a directory is there; the host does not replace it", "1 foresees failures: web-1"} {
		if !strings.Contains(plan, want) {
			t.Errorf("meshctl plan lacks %q:\n%s", want, plan)
		}
	}
	if pr.Code != 1 {
		t.Errorf("meshctl plan of a canary foreseen to fail: exit %d, want 1", pr.Code)
	}
	if got := content(t, hosts[1], "etc/motd"); got != "v1 web-2\n" {
		t.Errorf("web-2 changed by a plan: motd %q", got)
	}
	r := bed.Meshctl("rollout", "--select", "role=web", "--canary", "1", "--wait-healthy", "30s")
	if r.Code != 1 || !strings.Contains(r.Stderr, "halted: canary web-1 failed in wave 0") {
		t.Fatalf("rollout past a failing canary: %s", r)
	}
	st := rolloutStatus(t, bed)
	for _, n := range st.Nodes {
		switch {
		case n.Node == "web-1" && n.Step != "failed":
			t.Errorf("canary %s is %s", n.Node, n.Step)
		case n.Node != "web-1" && n.Step != "pending":
			t.Errorf("%s is %s after the canary failed; want pending (never pushed)", n.Node, n.Step)
		}
	}
	for _, h := range hosts[1:] {
		if got := content(t, h, "etc/motd"); got != "v1 "+h.Name+"\n" {
			t.Errorf("%s changed after its canary failed: motd %q", h.Name, got)
		}
	}
	// Nothing was declared to them either.
	nodes := bed.MustMeshctl("nodes", "--json")
	for _, line := range strings.Split(strings.TrimSpace(nodes), "\n") {
		var n struct {
			Node    string `json:"node"`
			Desired uint64 `json:"desired"`
		}
		if err := json.Unmarshal([]byte(line), &n); err != nil {
			t.Fatal(err)
		}
		if n.Node != "web-1" && n.Desired != 1 {
			t.Errorf("%s desired revision %d, want 1", n.Node, n.Desired)
		}
	}

	// Revert: web-1 is declared revision 1 again, as revision 3.
	out = bed.MustMeshctl("rollout", "abort", "--revert")
	if !strings.Contains(out, "web-1: revision 3 declares again revision 1, its last known good") {
		t.Fatalf("abort --revert:\n%s", out)
	}
	testbeds.Eventually(t, 30*time.Second, "web-1 back at v1", func() error {
		if got := content(t, hosts[0], "etc/motd"); got != "v1 web-1\n" {
			return fmt.Errorf("motd %q", got)
		}
		return nil
	})
	if st := rolloutStatus(t, bed); st.State != "aborted" || st.Nodes[0].Step != "reverted" {
		t.Errorf("after abort --revert: state %s, web-1 %s", st.State, st.Nodes[0].Step)
	}
	// The canary's journal names the rollout and its operator.
	recs := hosts[0].Records()
	named := false
	for _, rec := range recs {
		if rec.Kind == "declaration.received" && strings.Contains(string(rec.Payload), "via rollout "+st.ID) {
			named = true
		}
	}
	if !named {
		t.Errorf("no declaration.received of web-1 names rollout %s", st.ID)
	}
	events := bed.MustMeshctl("rollout", "status", "--events")
	for _, want := range []string{"started", "pushed\tweb-1", "failed\tweb-1", "halted\tweb-1", "aborted", "reverted\tweb-1"} {
		if !strings.Contains(events, want) {
			t.Errorf("rollout events lack %q:\n%s", want, events)
		}
	}
}

// A paused rollout survives its control service: after a restart it
// resumes where it stood and finishes.
func TestPausedRolloutResumesAfterControlRestart(t *testing.T) {
	bed := testbeds.New(t, bins)
	hosts := webFleet(t, bed, 3)
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"hello ${node}\\n\"}\n", "--select", "role=web")

	bed.MustMeshctl("rollout", "--select", "role=web", "--canary", "1", "--max-in-flight", "1", "--detach")
	bed.MustMeshctl("rollout", "pause")
	before := rolloutStatus(t, bed)
	if before.State != "paused" {
		t.Fatalf("rollout %s after pause", before.State)
	}
	bed.Control.Restart()
	time.Sleep(time.Second)
	if st := rolloutStatus(t, bed); st.State != "paused" {
		t.Fatalf("rollout %s after the restart, want paused", st.State)
	}
	out := bed.MustMeshctl("rollout", "resume")
	if !strings.Contains(out, "done: 3 converged") {
		t.Fatalf("resume:\n%s", out)
	}
	after := rolloutStatus(t, bed)
	if after.Holder == before.Holder && before.Holder != "" {
		t.Errorf("the same holder %s drove it after the restart", after.Holder)
	}
	for _, h := range hosts {
		if got := content(t, h, "etc/motd"); got != "hello "+h.Name+"\n" {
			t.Errorf("%s motd %q", h.Name, got)
		}
	}
	// Rolled out again unchanged: nothing pushed.
	out = bed.MustMeshctl("rollout", "--select", "role=web")
	if !strings.Contains(out, "done: 0 converged, 3 unchanged") {
		t.Errorf("a second rollout of the same profiles:\n%s", out)
	}
}

// A release a canary's launcher rolls back halts its rollout there: no
// other node is declared it, and the build is bad for the mesh, so no
// later release of it reaches any node.
func TestBadReleaseStopsAtItsCanary(t *testing.T) {
	u := newUpgradeBed(t)
	h2 := u.AddHost("web-2")
	if _, err := h2.Install(bins.MeshHost); err != nil {
		t.Fatal(err)
	}
	h2.StartLauncher(launcher(t, u.Bed), "MESH_HOST_RESTART_DELAY=0")
	u.MustMeshctl("declare", "web-2", u.Declare("web-2", 1, testbeds.Files{"/etc/motd": "hi\n"}))
	u.MustMeshctl("label", "web-1", "role=web", "canary=yes")
	u.MustMeshctl("label", "web-2", "role=web")

	bad := u.release(t, badVersion(t, u.dir))
	r := u.Meshctl("release", bad.Path, "--select", "role=web", "--canary", "1", "--wait-healthy", "90s")
	want := "halted: canary web-1 failed in wave 0: its launcher rolled release " + bad.Version()[:12] + " back"
	if r.Code != 1 || !strings.Contains(r.Stderr, want) {
		t.Fatalf("release past a canary that rolls it back: %s\nwant %q", r, want)
	}
	st := rolloutStatus(t, u.Bed)
	for _, n := range st.Nodes {
		if n.Node == "web-2" && n.Step != "pending" {
			t.Errorf("web-2 is %s; the release should not have reached it", n.Step)
		}
	}
	nodes, err := testbeds.JSONLines[struct {
		Node    string `json:"node"`
		Desired uint64 `json:"desired"`
	}](u.MustMeshctl("nodes", "--json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Node == "web-2" && n.Desired != 1 {
			t.Errorf("web-2 desired revision %d, want 1: the bad release was declared to it", n.Desired)
		}
	}
	// Bad for the mesh: refused by rollout and one by one alike.
	u.MustMeshctl("rollout", "abort")
	for _, args := range [][]string{{"--select", "role=web"}, {"--nodes", "web-2"}} {
		r := u.Meshctl(append([]string{"release", bad.Path}, args...)...)
		if r.Code != 2 || !strings.Contains(r.Stderr, "is bad for this mesh: web-1 rolled it back") {
			t.Errorf("release %v of a bad build: %s", args, r)
		}
	}
}
