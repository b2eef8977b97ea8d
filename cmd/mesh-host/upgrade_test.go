package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/upgrade"
	"github.com/mesh-host/mesh-host/upgrade/upgradetest"
)

// The tests here run the real binary as versions in a root of their own:
// copied into ROOT/opt/mesh-host/versions/NAME with an arrival marker, as
// the archive driver leaves one, and started from there (or by the real
// launcher script).

// upgradeBed is a root, a state directory and a versions directory, with
// the test's build of mesh-host (unmanaged: it runs from a build
// directory) to ask questions with.
type upgradeBed struct {
	t                              *testing.T
	bin                            string
	dir, root, state, versions     string
	global                         []string
	procs                          []*proc
	launcherScript, launcherStderr string
}

func newUpgradeBed(t *testing.T) *upgradeBed {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the service as processes; skipped with -short")
	}
	dir := t.TempDir()
	b := &upgradeBed{t: t, bin: binary(t), dir: dir, root: filepath.Join(dir, "root"), state: filepath.Join(dir, "state")}
	b.versions = filepath.Join(b.root, upgrade.DefaultVersionsDir)
	b.global = []string{"--root", b.root, "--state-dir", b.state}
	for _, d := range []string{filepath.Join(b.root, "etc"), b.versions} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, p := range b.procs {
			p.kill()
		}
	})
	return b
}

// install makes the test's binary the version name, arrived counter-th.
func (b *upgradeBed) install(name string, counter uint64) string {
	b.t.Helper()
	return filepath.Join(upgradetest.PlaceVersion(b.t, b.versions, name, counter, b.bin), upgrade.Executable)
}

// mesh runs the test's build with the bed's global flags.
func (b *upgradeBed) mesh(args ...string) string {
	b.t.Helper()
	out, err := exec.Command(b.bin, append(b.global, args...)...).CombinedOutput()
	if err != nil {
		b.t.Fatalf("mesh-host %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// records are the journal's records of kind, through the service when one
// runs.
func (b *upgradeBed) records(kind event.Kind) []event.Record {
	b.t.Helper()
	out, err := exec.Command(b.bin, append(b.global, "journal", "--json", "--kind", string(kind))...).Output()
	if err != nil {
		return nil // no journal yet, or the service is between two states
	}
	var rs []event.Record
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r event.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.t.Fatalf("journal --json: %v: %s", err, sc.Bytes())
		}
		rs = append(rs, r)
	}
	return rs
}

func payload[P any](t *testing.T, r event.Record) P {
	t.Helper()
	var p P
	if err := json.Unmarshal(r.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// versionsOf are the versions named by the records' VersionPayloads.
func versionsOf(t *testing.T, rs []event.Record) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, payload[event.VersionPayload](t, r).Version)
	}
	return out
}

func (b *upgradeBed) knownGood() string {
	kg, _ := upgrade.ReadKnownGood(b.state)
	return kg
}

// eventually polls cond until it holds or limit passes.
func (b *upgradeBed) eventually(limit time.Duration, what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, p := range b.procs {
				fmt.Fprintf(&logs, "--- %s:\n%s\n", p.name, p.stderr.String())
			}
			b.t.Fatalf("timed out after %s waiting for %s\n%s", limit, what, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReconciles waits for n more reconcile.completed records.
func (b *upgradeBed) waitReconciles(n int) {
	b.t.Helper()
	before := len(b.records(event.ReconcileCompleted))
	b.eventually(30*time.Second, fmt.Sprintf("%d more reconciles", n), func() bool {
		return len(b.records(event.ReconcileCompleted)) >= before+n
	})
}

// proc is a process the bed started.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
}

func (b *upgradeBed) start(name string, env []string, argv ...string) *proc {
	b.t.Helper()
	p := &proc{name: name, cmd: exec.Command(argv[0], argv[1:]...), stderr: new(syncBuffer), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	b.procs = append(b.procs, p)
	return p
}

// serve starts the version exe as the service.
func (b *upgradeBed) serve(exe string, flags ...string) *proc {
	b.t.Helper()
	return b.start("serve "+exe, nil, append(append([]string{exe}, b.global...), append([]string{"serve"}, flags...)...)...)
}

func (p *proc) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// wait waits for the process to end and returns its exit code (-1 when
// killed by a signal).
func (p *proc) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		p.kill()
		t.Fatalf("%s still runs after %s; it said:\n%s", p.name, limit, p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) kill() {
	if p.running() {
		p.cmd.Process.Kill()
		<-p.done
	}
}

// TestServeStaysThenStandsAside: a managed version confirms itself after
// its first reconcile and, its binary unchanged, stays through a hundred
// drift reconciles; a newer version delivered makes it stand aside (exit 0)
// after the reconcile it is in.
func TestServeStaysThenStandsAside(t *testing.T) {
	b := newUpgradeBed(t)
	decl := filepath.Join(b.dir, "decl.yaml")
	writeFilesDeclaration(t, decl, 3)
	b.mesh("apply", decl)
	exe := b.install("aaaa", 1)
	serve := b.serve(exe, "--drift-interval", "10ms")
	// The record follows the journal's version.confirmed (service.confirm
	// orders them so that a kill between is harmless).
	b.eventually(20*time.Second, "version.confirmed aaaa, and the known-good record naming it", func() bool {
		return slices.Equal(versionsOf(t, b.records(event.VersionConfirmed)), []string{"aaaa"}) && b.knownGood() == "aaaa"
	})
	started := b.records(event.HostStarted)
	if p := payload[event.HostStartedPayload](t, started[len(started)-1]); p.Version != "aaaa" || p.Build != "dev" {
		t.Errorf("host.started %+v, want version aaaa, build dev", p)
	}
	if st := b.mesh("status"); !strings.Contains(st, "version aaaa (build dev), pid") {
		t.Errorf("status says:\n%s", st)
	}
	b.waitReconciles(100)
	if !serve.running() {
		t.Fatalf("the service ended with its binary unchanged:\n%s", serve.stderr.String())
	}
	if rs := b.records(event.VersionStoodAside); len(rs) != 0 {
		t.Fatalf("stood aside with nothing newer: %s", rs[0].Payload)
	}

	b.install("0000", 2) // sorts first, arrived last
	if code := serve.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("serve exited %d, want 0; it said:\n%s", code, serve.stderr.String())
	}
	aside := b.records(event.VersionStoodAside)
	if len(aside) != 1 {
		t.Fatalf("%d version.stood-aside records", len(aside))
	}
	if p := payload[event.VersionStoodAsidePayload](t, aside[0]); p.Running != "aaaa" || p.Newer != "0000" {
		t.Errorf("stood aside %+v", p)
	}
	if d := versionsOf(t, b.records(event.VersionDelivered)); !slices.Equal(d, []string{"aaaa", "0000"}) {
		t.Errorf("delivered %v", d)
	}
	b.mesh("replay", "--verify")
}

// TestServeStandsAsideAfterTheApplyInFlight: a version delivered while the
// start reconcile applies 5,000 files: the apply completes and is
// journaled, then the host stands aside.
func TestServeStandsAsideAfterTheApplyInFlight(t *testing.T) {
	b := newUpgradeBed(t)
	const n = 5000
	decl := filepath.Join(b.dir, "decl.yaml")
	writeFilesDeclaration(t, decl, n)
	b.mesh("apply", decl)
	// Undo it behind the host's back: its start reconcile repairs it.
	os.RemoveAll(filepath.Join(b.root, "etc/app"))
	serve := b.serve(b.install("one", 1), "--drift-interval", "1h")
	b.eventually(30*time.Second, "the start reconcile", func() bool {
		for _, r := range b.records(event.ReconcileStarted) {
			if payload[event.ReconcileStartedPayload](t, r).Trigger == event.TriggerStart {
				return true
			}
		}
		return false
	})
	b.install("two", 2)
	delivered := time.Now()
	if code := serve.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("serve exited %d; it said:\n%s", code, serve.stderr.String())
	}
	completed := b.records(event.ReconcileCompleted)
	last := completed[len(completed)-1]
	lp := payload[event.ReconcileCompletedPayload](t, last)
	aside := b.records(event.VersionStoodAside)
	if len(aside) != 1 || aside[0].Seq < last.Seq {
		t.Fatalf("stood-aside records %v after the last reconcile #%d", aside, last.Seq)
	}
	if lp.Trigger != event.TriggerStart || lp.Result != event.ResultConverged || lp.Changed != n+1 {
		t.Fatalf("last reconcile %+v, want the start reconcile converged with %d changes", lp, n+1)
	}
	if !last.Time.After(delivered) {
		t.Logf("the reconcile completed (%s) before the delivery (%s): nothing was in flight", last.Time, delivered)
	}
	if files, _ := filepath.Glob(filepath.Join(b.root, "etc/app/f*.conf")); len(files) != n {
		t.Errorf("%d of %d files in place", len(files), n)
	}
	var st struct {
		State struct {
			Pending any `json:"pending"`
		} `json:"state"`
	}
	json.Unmarshal([]byte(b.mesh("status", "--json")), &st)
	if st.State.Pending != nil {
		t.Errorf("a reconcile is pending after the stand-aside: %v", st.State.Pending)
	}
}

// TestServeStandsAsideForAnArchiveItApplied: the delivery the mesh makes,
// an archive resource into the versions directory, applied through the
// service by `mesh-host apply`: the apply completes, then the host stands
// aside.
func TestServeStandsAsideForAnArchiveItApplied(t *testing.T) {
	b := newUpgradeBed(t)
	serve := b.serve(b.install("first", 1), "--drift-interval", "1h")
	b.eventually(20*time.Second, "version.confirmed", func() bool { return len(b.records(event.VersionConfirmed)) == 1 })
	rel := b.release()
	decl := filepath.Join(b.dir, "decl.yaml")
	writeFilesDeclaration(t, decl, 2000)
	appendResource(t, decl, rel.archiveYAML())
	out := b.mesh("apply", decl)
	if !strings.Contains(out, "archive:/opt/mesh-host/versions/"+rel.version()) {
		t.Errorf("apply said:\n%s", out)
	}
	if code := serve.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d; it said:\n%s", code, serve.stderr.String())
	}
	aside := b.records(event.VersionStoodAside)
	completed := b.records(event.ReconcileCompleted)
	if len(aside) != 1 || aside[0].Seq < completed[len(completed)-1].Seq {
		t.Fatalf("stood aside %v; last reconcile #%d", aside, completed[len(completed)-1].Seq)
	}
	if p := payload[event.VersionStoodAsidePayload](t, aside[0]); p.Newer != rel.version() {
		t.Errorf("stood aside for %q, want %s", p.Newer, rel.version())
	}
	if v, _, _ := upgrade.Newest(b.versions); v.Name != rel.version() {
		t.Errorf("newest %s, want the delivered %s", v.Name, rel.version())
	}
}

// TestServeStandsAsideWhenReplaced: an unmanaged host (run from a build
// directory) stands aside when its executable is replaced, and only then.
func TestServeStandsAsideWhenReplaced(t *testing.T) {
	b := newUpgradeBed(t)
	decl := filepath.Join(b.dir, "decl.yaml")
	writeFilesDeclaration(t, decl, 3)
	b.mesh("apply", decl)
	exe := filepath.Join(b.dir, "bin", "mesh-host")
	os.MkdirAll(filepath.Dir(exe), 0o755)
	copyFile(t, b.bin, exe)
	serve := b.serve(exe, "--drift-interval", "10ms")
	b.eventually(20*time.Second, "the socket", func() bool {
		_, err := os.Stat(filepath.Join(b.state, "control.sock"))
		return err == nil
	})
	b.waitReconciles(30)
	if !serve.running() {
		t.Fatalf("ended with its executable unchanged:\n%s", serve.stderr.String())
	}
	if p := payload[event.HostStartedPayload](t, b.records(event.HostStarted)[0]); p.Version != "dev" || p.Build != "" {
		t.Errorf("host.started %+v, want the link-time version alone", p)
	}
	copyFile(t, b.bin, exe+".new")
	if err := os.Rename(exe+".new", exe); err != nil {
		t.Fatal(err)
	}
	if code := serve.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("serve exited %d; it said:\n%s", code, serve.stderr.String())
	}
	aside := b.records(event.VersionStoodAside)
	if len(aside) != 1 {
		t.Fatalf("%d stood-aside records", len(aside))
	}
	if p := payload[event.VersionStoodAsidePayload](t, aside[0]); p.Running != "dev" || !strings.Contains(p.Reason, exe) {
		t.Errorf("stood aside %+v", p)
	}
}

// TestUpgradeAndRollbackThroughTheLauncher: the real launcher and real
// versions. A version delivered by an archive is run and the old one is
// not; the report names the running version; a version that will not
// start is rolled back from, once, journaled by the version rolled back
// to, which then stays; a newer good version after it is run, and retires
// what is older than its predecessor.
func TestUpgradeAndRollbackThroughTheLauncher(t *testing.T) {
	b := newUpgradeBed(t)
	b.install("first", 1)
	launcher := b.startLauncher("--", "--drift-interval", "100ms")
	b.eventually(20*time.Second, "first confirmed", func() bool { return b.knownGood() == "first" })

	// An archive delivers the second version; the first stands aside and
	// the launcher starts the second, which confirms itself.
	rel := b.release()
	decl := filepath.Join(b.dir, "decl.yaml")
	writeFilesDeclaration(t, decl, 3)
	appendResource(t, decl, rel.archiveYAML())
	b.mesh("apply", decl)
	second := rel.version()
	b.eventually(30*time.Second, "the second version confirmed", func() bool { return b.knownGood() == second })
	if st := b.mesh("status"); !strings.Contains(st, "version "+second+" (build dev)") {
		t.Errorf("status after the upgrade:\n%s", st)
	}
	wantStrings(t, "on disk after the upgrade", upgradetest.VersionNames(t, b.versions), "first", second)

	// A version that will not start.
	upgradetest.PlaceVersion(t, b.versions, "broken", 3, "")
	os.WriteFile(filepath.Join(b.versions, "broken", upgrade.Executable), []byte("#!/bin/sh\necho broken >&2\nexit 1\n"), 0o755)
	b.eventually(30*time.Second, "version.rolled-back", func() bool { return len(b.records(event.VersionRolledBack)) == 1 })
	rb := payload[event.VersionRolledBackPayload](t, b.records(event.VersionRolledBack)[0])
	if rb.From != "broken" || rb.To != second || !strings.Contains(rb.Reason, "exit code 1") {
		t.Errorf("rolled back %+v", rb)
	}
	// The version rolled back to stays: no stand-aside for the bad one.
	starts := len(b.records(event.HostStarted))
	b.waitReconciles(10)
	if n := len(b.records(event.HostStarted)); n != starts {
		t.Fatalf("%d host starts after the rollback settled, want %d: the host keeps standing aside", n, starts)
	}
	if !launcher.running() {
		t.Fatalf("the launcher ended:\n%s", launcher.stderr.String())
	}

	// A good version after the broken one.
	b.install("fourth", 4)
	b.eventually(30*time.Second, "the fourth version confirmed", func() bool { return b.knownGood() == "fourth" })
	// first arrived before the predecessor (second): retired. broken
	// arrived after it: kept until the next upgrade.
	wantStrings(t, "on disk after the fourth", upgradetest.VersionNames(t, b.versions), second, "broken", "fourth")
	if v, _, _ := upgrade.Bad(b.state); v != "" {
		t.Errorf("the bad mark is still %q", v)
	}
	if r := versionsOf(t, b.records(event.VersionRetired)); !slices.Equal(r, []string{"first"}) {
		t.Errorf("retired %v", r)
	}

	launcher.cmd.Process.Signal(syscall.SIGTERM)
	if code := launcher.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("the launcher exited %d on SIGTERM:\n%s", code, launcher.stderr.String())
	}
	b.mesh("replay", "--verify")
}

// startLauncher runs the embedded launcher script as the unit would.
func (b *upgradeBed) startLauncher(serveArgs ...string) *proc {
	b.t.Helper()
	script := filepath.Join(b.dir, "launcher")
	if err := os.WriteFile(script, upgrade.Launcher, 0o755); err != nil {
		b.t.Fatal(err)
	}
	env := []string{"MESH_HOST_VERSIONS=" + b.versions, "MESH_HOST_STATE_DIR=" + b.state, "MESH_HOST_RESTART_DELAY=0"}
	return b.start("launcher", env, append([]string{"sh", script, "--root", b.root}, serveArgs...)...)
}

// release is the test's binary packed as a release archive; path is where
// it is beneath the root, as its file source names it.
type release struct{ path, digest string }

func (r release) version() string { return strings.TrimPrefix(r.digest, "sha256:") }

func (r release) archiveYAML() string {
	return fmt.Sprintf("  - archive: {path: %q, source: %q, digest: %q, format: tar.gz}\n",
		upgrade.DefaultVersionsDir+"/${version}", "file://"+r.path, r.digest)
}

func (b *upgradeBed) release() release {
	b.t.Helper()
	exe, err := os.ReadFile(b.bin)
	if err != nil {
		b.t.Fatal(err)
	}
	releases := filepath.Join(b.root, "srv/releases")
	if err := os.MkdirAll(releases, 0o755); err != nil {
		b.t.Fatal(err)
	}
	f, err := os.CreateTemp(releases, "release-*.tar.gz")
	if err != nil {
		b.t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "mesh-host", Mode: 0o755, Size: int64(len(exe)), Typeflag: tar.TypeReg, ModTime: time.Now()})
	tw.Write(exe)
	id := []byte(filepath.Base(f.Name())) // two releases of one binary differ
	tw.WriteHeader(&tar.Header{Name: "release", Mode: 0o644, Size: int64(len(id)), Typeflag: tar.TypeReg, ModTime: time.Now()})
	tw.Write(id)
	tw.Close()
	zw.Close()
	f.Close()
	data, _ := os.ReadFile(f.Name())
	sum := sha256.Sum256(data)
	return release{path: "/srv/releases/" + filepath.Base(f.Name()), digest: "sha256:" + hex.EncodeToString(sum[:])}
}

func appendResource(t *testing.T, decl, yaml string) {
	t.Helper()
	f, err := os.OpenFile(decl, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(yaml); err != nil {
		t.Fatal(err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestKilledUpgradeLeavesARunnableNewest: `mesh-host serve` of a new
// version, killed (SIGKILL) at a random moment of confirming itself and
// retiring thirty old versions, leaves the newest version runnable, a
// known-good record naming a version on disk, and a journal that verifies;
// the next start finishes the job.
func TestKilledUpgradeLeavesARunnableNewest(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes; skipped with -short")
	}
	const old = 30
	setup := func(b *upgradeBed) string {
		for i := range old {
			vdir := upgradetest.PlaceVersion(t, b.versions, fmt.Sprintf("old%02d", i), uint64(i+1), "")
			for k := range 20 { // something to remove
				os.WriteFile(filepath.Join(vdir, fmt.Sprintf("f%03d", k)), []byte("x"), 0o644)
			}
		}
		upgradetest.PlaceVersion(t, b.versions, "pred", old+1, "")
		if err := upgrade.WriteKnownGood(b.state, "pred"); err != nil {
			t.Fatal(err)
		}
		return b.install("run", old+2)
	}
	done := func(b *upgradeBed) bool {
		entries, _ := os.ReadDir(b.versions)
		return b.knownGood() == "run" && len(entries) == 2
	}
	full := func() time.Duration {
		fb := newUpgradeBed(t)
		exe := setup(fb)
		start := time.Now()
		serve := fb.serve(exe, "--drift-interval", "1h")
		fb.eventually(30*time.Second, "the upgrade done", func() bool { return done(fb) })
		took := time.Since(start)
		serve.kill()
		return took
	}()
	t.Logf("a whole start, confirmation and retirement takes %s here", full)

	for round := range 12 {
		b := newUpgradeBed(t)
		exe := setup(b)
		serve := b.serve(exe, "--drift-interval", "1h")
		time.Sleep(time.Duration(rand.Int64N(int64(full + full/4))))
		serve.kill()

		vs, err := upgrade.List(b.versions)
		if err != nil {
			t.Fatal(err)
		}
		if len(vs) == 0 || vs[len(vs)-1].Name != "run" {
			t.Fatalf("round %d: newest after the kill is not run: %v", round, vs)
		}
		kg := b.knownGood()
		if kg != "pred" && kg != "run" {
			t.Fatalf("round %d: known-good %q after the kill", round, kg)
		}
		if _, err := upgrade.Lookup(b.versions, kg); err != nil {
			t.Fatalf("round %d: the known-good version is not runnable: %v", round, err)
		}
		t.Logf("round %d: killed with %d versions left, known-good %s", round, len(vs), kg)
		// A kill before the journal's first write leaves none (an empty
		// file counts as none).
		if out, err := exec.Command(b.bin, append(b.global, "replay", "--verify")...).CombinedOutput(); err != nil && !strings.Contains(string(out), "journal does not exist") {
			t.Fatalf("round %d: replay --verify after the kill: %v\n%s", round, err, out)
		}

		serve = b.serve(exe, "--drift-interval", "1h")
		b.eventually(30*time.Second, "the upgrade finished by the next start", func() bool { return done(b) })
		b.eventually(10*time.Second, "the journal to say so", func() bool {
			return slices.Equal(versionsOf(t, b.records(event.VersionConfirmed)), []string{"run"})
		})
		// When the kill came after the upgrade was done, all of the above
		// holds at once: wait until this serve answers, so SIGTERM finds
		// it serving, not before it handles signals.
		b.eventually(30*time.Second, "serve to say it serves", func() bool {
			return strings.Contains(serve.stderr.String(), "mesh-host serving")
		})
		serve.cmd.Process.Signal(syscall.SIGTERM)
		if code := serve.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("round %d: serve exited %d", round, code)
		}
		wantStrings(t, "on disk", upgradetest.VersionNames(t, b.versions), "pred", "run")
		b.mesh("replay", "--verify")
	}
}

// TestVersionArchivesAreReleased: a declaration that stops naming a
// version's archive leaves the version in place (released), since the
// running version and its predecessor must outlive it; another archive
// no longer declared is removed as ever.
func TestVersionArchivesAreReleased(t *testing.T) {
	b := &upgradeBed{t: t, dir: t.TempDir()}
	b.root, b.state = filepath.Join(b.dir, "root"), filepath.Join(b.dir, "state")
	b.versions = filepath.Join(b.root, upgrade.DefaultVersionsDir)
	os.MkdirAll(b.versions, 0o755)
	os.MkdirAll(filepath.Join(b.root, "srv"), 0o755)
	b.bin = filepath.Join(b.dir, "stub") // only packed, never run
	os.WriteFile(b.bin, []byte("#!/bin/sh\n"), 0o755)
	r1, r2 := b.release(), b.release()
	apply := func(rev int, resources string) string {
		t.Helper()
		decl := filepath.Join(b.dir, fmt.Sprintf("decl%d.yaml", rev))
		os.WriteFile(decl, []byte(fmt.Sprintf("mesh: m\nnode: n\nrevision: %d\nresources:\n%s", rev, resources)), 0o600)
		var out bytes.Buffer
		if code := runCLI(t.Context(), []string{"--root", b.root, "--state-dir", b.state, "apply", decl}, &out, &out, nil); code != 0 {
			t.Fatalf("apply revision %d: exit %d\n%s", rev, code, out.String())
		}
		return out.String()
	}
	other := fmt.Sprintf("  - archive: {path: /srv/app, source: %q, digest: %q, format: tar.gz}\n", "file://"+r1.path, r1.digest)
	apply(1, r1.archiveYAML()+other)
	out := apply(2, r2.archiveYAML())
	if !strings.Contains(out, "archive:/opt/mesh-host/versions/"+r1.version()) || !strings.Contains(out, string(event.ActionReleased)) {
		t.Errorf("apply said:\n%s", out)
	}
	wantStrings(t, "versions", upgradetest.VersionNames(t, b.versions), r1.version(), r2.version())
	if _, err := os.Stat(filepath.Join(b.root, "srv/app")); !os.IsNotExist(err) {
		t.Errorf("the other archive no longer declared is still there: %v", err)
	}
}

// TestServeNoticesAVersionDeliveredOutsideAReconcile: a version put in
// place by something else (a package upgrade: staged under a dot name,
// renamed into place, its marker written last) is noticed with no reconcile
// due for an hour.
func TestServeNoticesAVersionDeliveredOutsideAReconcile(t *testing.T) {
	b := newUpgradeBed(t)
	serve := b.serve(b.install("installed", 1), "--drift-interval", "1h")
	b.eventually(20*time.Second, "version.confirmed", func() bool { return len(b.records(event.VersionConfirmed)) == 1 })
	stage := filepath.Join(b.versions, ".mesh-host-arrive-x")
	os.MkdirAll(stage, 0o755)
	copyFile(t, b.bin, filepath.Join(stage, upgrade.Executable))
	if err := os.Rename(stage, filepath.Join(b.versions, "upgraded")); err != nil {
		t.Fatal(err)
	}
	if !serve.running() {
		t.Fatal("stood aside for a directory without its marker")
	}
	marker := filepath.Join(b.versions, "upgraded", upgrade.ArrivedFile)
	os.WriteFile(marker+".tmp", []byte(time.Now().UTC().Format(time.RFC3339Nano)+" 2\n"), 0o644)
	os.Rename(marker+".tmp", marker)
	if code := serve.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("serve exited %d; it said:\n%s", code, serve.stderr.String())
	}
	aside := b.records(event.VersionStoodAside)
	if len(aside) != 1 || payload[event.VersionStoodAsidePayload](t, aside[0]).Newer != "upgraded" {
		t.Fatalf("stood aside: %v", aside)
	}
	// The start's reconcile (nothing declared: one quiet record) came
	// before the confirmation, as every confirmation follows one; the look
	// that noticed the version needed none.
	confirmed := b.records(event.VersionConfirmed)[0].Seq
	completed := b.records(event.ReconcileCompleted)
	if len(completed) == 0 || completed[0].Seq > confirmed {
		t.Errorf("version.confirmed (#%d) follows no reconcile.completed: %v", confirmed, completed)
	}
	for _, r := range append(b.records(event.ReconcileStarted), completed...) {
		if r.Seq > confirmed {
			t.Errorf("reconcile record #%d after the confirmation: the look needed none", r.Seq)
		}
	}
}
