package systemd_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds"
	"github.com/mesh-host/mesh-host/testbeds/systemd"
	"github.com/mesh-host/mesh-host/upgrade"
)

// buildDir holds what the tests build, once per test binary; TestMain
// removes it.
var buildDir string

func TestMain(m *testing.M) {
	var err error
	if buildDir, err = os.MkdirTemp("", "mesh-systemd-bed-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(buildDir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	bins      testbeds.Binaries
	pkgs      systemd.Packages
	buildErr  error
)

// builds are the bed's programs (meshctl runs on this machine) and the
// host's packages, built once and only by a test that needs them.
func builds(t testing.TB) (testbeds.Binaries, systemd.Packages) {
	t.Helper()
	buildOnce.Do(func() {
		start := time.Now()
		if bins, buildErr = testbeds.Build(filepath.Join(buildDir), "bed"); buildErr != nil {
			return
		}
		pkgs, buildErr = systemd.BuildPackages(filepath.Join(buildDir, "dist"), "systemd-bed")
		t.Logf("built meshctl and the host's packages in %s", time.Since(start).Round(100*time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bins, pkgs
}

// requireContainers skips the test with -short or where containers
// cannot be booted.
func requireContainers(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots containers with systemd-nspawn; skipped with -short")
	}
	systemd.Require(t)
}

// boot boots a container, unless the test is skipped.
func boot(t testing.TB, opt systemd.Options) *systemd.Container {
	t.Helper()
	requireContainers(t)
	return systemd.Boot(t, opt)
}

// node boots a container, starts a mesh, and installs the host in the
// container from its package, enrolled as web-1, with a declaration
// applied and its version confirmed.
func node(t testing.TB) *systemd.Host {
	t.Helper()
	c := boot(t, systemd.Options{})
	b, p := builds(t)
	bed := testbeds.New(t, b)
	h := systemd.InstallHost(t, c, bed, p, "web-1")
	h.Declare(t, 1, testbeds.Files{"/etc/motd": "held by the mesh\n"})
	return h
}

// TestSystemdTreeInstallsTheWebServerOffline: a container without a
// network refreshes its apt lists and installs the web server from the
// tree's own repository, and systemd starts it.
func TestSystemdTreeInstallsTheWebServerOffline(t *testing.T) {
	c := boot(t, systemd.Options{PrivateNetwork: true})
	// Loopback is its only interface: nothing is reachable.
	var ifaces []string
	for _, line := range strings.Split(c.MustExec("cat", "/proc/net/dev"), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			ifaces = append(ifaces, name)
		}
	}
	if !slices.Equal(ifaces, []string{"lo"}) {
		t.Fatalf("interfaces %v, want lo alone", ifaces)
	}
	if r := c.Try("dpkg-query", "-W", "-f=${db:Status-Abbrev}", systemd.OfflinePackage); strings.HasPrefix(r.Stdout, "ii") {
		t.Fatalf("%s is installed in the tree already", systemd.OfflinePackage)
	}
	c.MustExec("apt-get", "update")
	c.MustExec("apt-get", "install", "-y", systemd.OfflinePackage)
	if got := c.Try("systemctl", "is-active", systemd.OfflinePackage+".service").Stdout; strings.TrimSpace(got) != "active" {
		t.Fatalf("%s is %q after its install:\n%s", systemd.OfflinePackage, got, c.Journal(50, systemd.OfflinePackage+".service"))
	}
	// It serves: a socket listens on port 80 (0050), state 0A, in the
	// container's own network.
	testbeds.Eventually(t, 30*time.Second, "the web server listens on port 80", func() error {
		tcp := c.Try("cat", "/proc/net/tcp", "/proc/net/tcp6").Stdout
		for line := range strings.Lines(tcp) {
			if f := strings.Fields(line); len(f) > 3 && strings.HasSuffix(f[1], ":0050") && f[3] == "0A" {
				return nil
			}
		}
		return fmt.Errorf("no listener on port 80:\n%s", tcp)
	})
}

// TestSystemdTwoContainersAtOnce: two containers of the one tree run side
// by side, each its own machine, neither writing to the tree; stopping
// one leaves the other running and nothing of the first behind.
func TestSystemdTwoContainersAtOnce(t *testing.T) {
	a := boot(t, systemd.Options{})
	b := boot(t, systemd.Options{})
	if a.Name == b.Name {
		t.Fatalf("both are %s", a.Name)
	}
	for _, c := range []*systemd.Container{a, b} {
		if got := strings.TrimSpace(c.MustExec("uname", "-n")); got != c.Name {
			t.Errorf("%s's hostname is %q", c.Name, got)
		}
	}
	a.MustExec("sh", "-c", "echo "+a.Name+" >/root/mark")
	if r := b.Try("cat", "/root/mark"); r.Code == 0 {
		t.Errorf("%s sees %s's file: %q", b.Name, a.Name, r.Stdout)
	}
	if _, err := os.Stat(filepath.Join(systemd.Tree(t), "root/mark")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a container wrote to the tree: %v", err)
	}
	if err := a.Stop(); err != nil {
		t.Fatalf("stop %s: %v", a.Name, err)
	}
	if a.Running() {
		t.Errorf("%s still runs after Stop", a.Name)
	}
	if got := strings.TrimSpace(b.MustExec("systemctl", "is-system-running")); got != "running" {
		t.Errorf("%s is %q once %s stopped", b.Name, got, a.Name)
	}
	if len(a.Cgroups()) == 0 {
		t.Errorf("%s had no cgroup of its own", a.Name)
	}
	for _, d := range a.Cgroups() {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s's cgroup %s is left (%v)", a.Name, d, err)
		}
	}
}

// TestSystemdHostRestartedAfterKill: the unit runs the launcher and the
// launcher the host. The host killed (SIGKILL) is started again by the
// launcher; the launcher killed, systemd restarts the unit. Either way
// a new process serves and every record journaled before the kill is
// still there, the new start's host.started after them.
func TestSystemdHostRestartedAfterKill(t *testing.T) {
	h := node(t)
	before, err := h.Unit()
	if err != nil {
		t.Fatal(err)
	}

	// The host, under the launcher.
	launcher, serve := processes(t, h)
	journaled := mustRecords(t, h)
	t.Logf("killing the host %d (its launcher %d), %d records journaled", serve, launcher, len(journaled))
	kill(t, serve)
	restarted(t, h, serve, journaled)
	after, err := h.Unit()
	if err != nil {
		t.Fatal(err)
	}
	if after.NRestarts != before.NRestarts || after.MainPID != before.MainPID || after.ActiveState != "active" {
		t.Errorf("the unit %+v after the host's kill, was %+v: the launcher, not systemd, starts the host again", after, before)
	}
	// That start completes a reconcile, so the kill is not counted
	// toward a rollback: three such would rightly roll back.
	testbeds.Eventually(t, 60*time.Second, "the new start clears the failed-start count", func() error {
		if f := h.StateFile("launcher/failures"); f != "" {
			return fmt.Errorf("failures: %s", f)
		}
		return nil
	})

	// The launcher itself, the unit's main process: systemd kills what
	// is left of the unit and starts it again.
	launcher, serve = processes(t, h)
	journaled = mustRecords(t, h)
	t.Logf("killing the launcher %d (its host %d), %d records journaled", launcher, serve, len(journaled))
	kill(t, launcher)
	restarted(t, h, serve, journaled)
	again, err := h.Unit()
	if err != nil {
		t.Fatal(err)
	}
	if again.NRestarts != after.NRestarts+1 || again.MainPID == after.MainPID || again.ActiveState != "active" {
		t.Errorf("the unit %+v after its main process's kill, was %+v: want restarted once by systemd", again, after)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", serve)); err == nil {
		t.Errorf("the host the killed launcher ran (%d) is still alive", serve)
	}
}

func processes(t *testing.T, h *systemd.Host) (launcher, serve int) {
	t.Helper()
	testbeds.Eventually(t, 30*time.Second, "the launcher runs a host", func() error {
		var err error
		launcher, serve, err = h.Processes()
		if err == nil && serve == 0 {
			err = errors.New("no host under the launcher")
		}
		return err
	})
	return launcher, serve
}

func kill(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", pid, err)
	}
}

func mustRecords(t *testing.T, h *systemd.Host) []event.Record {
	t.Helper()
	recs, err := h.Records()
	if err != nil {
		t.Fatalf("mesh-host journal --json: %v", err)
	}
	return recs
}

// restarted waits until a host other than old serves, mesh-host status
// answers, and its journal holds every record of before unchanged with
// the new start's host.started after them.
func restarted(t *testing.T, h *systemd.Host, old int, before []event.Record) {
	t.Helper()
	if len(before) == 0 {
		t.Fatal("nothing journaled before the kill")
	}
	last := before[len(before)-1].Seq
	testbeds.Eventually(t, 60*time.Second, "a new host serves with the journal whole", func() error {
		_, serve, err := h.Processes()
		if err != nil {
			return err
		}
		if serve == 0 || serve == old {
			return fmt.Errorf("the host is %d (killed: %d)", serve, old)
		}
		if r := h.Mesh("status"); r.Code != 0 {
			return errors.New(r.String())
		}
		after, err := h.Records()
		if err != nil {
			return err
		}
		bySeq := map[uint64]string{}
		started := false
		for _, r := range after {
			bySeq[r.Seq] = systemd.RecordJSON(r)
			started = started || r.Kind == event.HostStarted && r.Seq > last
		}
		for _, r := range before {
			if got := bySeq[r.Seq]; got != systemd.RecordJSON(r) {
				return testbeds.Fatal(fmt.Errorf("record #%d was %s before the kill, now %q", r.Seq, systemd.RecordJSON(r), got))
			}
		}
		if !started {
			return fmt.Errorf("no host.started after #%d yet", last)
		}
		return nil
	})
}

// badBuild packs a "version" that exits 1 at once, saying say, as a
// release archive: a build that cannot start on this machine.
func badBuild(t *testing.T, say string) testbeds.Release {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "mesh-host")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho '"+say+"' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := testbeds.Pack(bin, dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSystemdRollback is the failure story of docs/upgrade.md under real
// systemd: a release that cannot start is rolled back to the known-good
// version; a release whose rollback fails too halts the launcher with 78,
// which the unit does not restart, naming the machine.
func TestSystemdRollback(t *testing.T) {
	h := node(t)
	good := h.Installed

	bad := badBuild(t, "this build cannot start here")
	if !t.Run("rolled back to the known-good version", func(t *testing.T) {
		r := h.Bed.Meshctl("release", bad.Path, "--nodes", h.Node, "--wait", "3m")
		t.Logf("meshctl release: %s", r)
		if r.Code == 0 {
			t.Fatalf("meshctl release of a build that cannot start exited 0")
		}
		if want := h.Node + "'s launcher rolled release " + bad.Version()[:12] + " back"; !strings.Contains(r.Stderr, want) {
			t.Errorf("release does not say %q", want)
		}
		testbeds.Eventually(t, 60*time.Second, "the rollback is journaled", func() error {
			recs, err := h.Records()
			if err != nil {
				return err
			}
			for _, rec := range recs {
				if rec.Kind != event.VersionRolledBack {
					continue
				}
				var p event.VersionRolledBackPayload
				if err := json.Unmarshal(rec.Payload, &p); err != nil {
					return testbeds.Fatal(err)
				}
				if p.From != bad.Version() || p.To != good {
					return testbeds.Fatal(fmt.Errorf("rolled back %+v, want from %s to %s", p, bad.Version(), good))
				}
				return nil
			}
			return errors.New("no version.rolled-back yet")
		})
		h.WaitVersion(t, good)
		testbeds.Eventually(t, 30*time.Second, "meshctl nodes says rolled back", func() error {
			out := h.Bed.MustMeshctl("nodes")
			if !strings.Contains(out, "rolled back: release "+bad.Version()[:12]+" failed to start") {
				return fmt.Errorf("nodes:\n%s", out)
			}
			return nil
		})
		u, err := h.Unit()
		if err != nil {
			t.Fatal(err)
		}
		// The launcher restarts a failing version and rolls it back
		// within one run of the unit.
		if u.ActiveState != "active" || u.NRestarts != 0 {
			t.Errorf("the unit %+v after the rollback, want active and never restarted", u)
		}
		log := h.Journal(200, systemd.UnitName)
		for _, want := range []string{"this build cannot start here", "failed start 2 of 3", "rolling back to the known-good version " + good} {
			if !strings.Contains(log, want) {
				t.Errorf("the unit's journal does not say %q:\n%s", want, log)
			}
		}
	}) {
		return
	}

	t.Run("halted when the known-good version fails too, naming the machine", func(t *testing.T) {
		worse := badBuild(t, "nor can this one")
		h.Bed.MustMeshctl("release", worse.Path, "--nodes", h.Node, "--wait", "0")
		testbeds.Eventually(t, 60*time.Second, "the new release has failed a start", func() error {
			if f := h.StateFile("launcher/failures"); !strings.HasPrefix(f, worse.Version()+" ") {
				return fmt.Errorf("failures: %q", f)
			}
			return nil
		})
		// The machine breaks: a directory where the journal was, and
		// no version can start. (Not a damaged journal, on which the
		// launcher halts at once without a rollback.)
		h.MustExec("sh", "-c", "rm -f /var/lib/mesh-host/journal.db && mkdir /var/lib/mesh-host/journal.db")
		var halted systemd.UnitState
		testbeds.Eventually(t, 90*time.Second, "the unit fails with the launcher's 78", func() error {
			u, err := h.Unit()
			if err != nil {
				return err
			}
			if u.ActiveState != "failed" {
				return fmt.Errorf("unit %+v", u)
			}
			halted = u
			return nil
		})
		if halted.Result != "exit-code" || halted.ExecMainStatus != upgrade.HaltStatus {
			t.Errorf("the unit failed with %+v, want Result=exit-code ExecMainStatus=%d", halted, upgrade.HaltStatus)
		}
		// RestartPreventExitStatus=78: it stays failed past RestartSec
		// (2 s), which would have started it again.
		deadline := time.Now().Add(6 * time.Second)
		for time.Now().Before(deadline) {
			u, err := h.Unit()
			if err != nil {
				t.Fatal(err)
			}
			if u != halted {
				t.Fatalf("the halted unit changed: %+v, was %+v", u, halted)
			}
			time.Sleep(500 * time.Millisecond)
		}
		if got := strings.TrimSpace(h.Try("systemctl", "is-failed", systemd.UnitName).Stdout); got != "failed" {
			t.Errorf("systemctl is-failed says %q", got)
		}
		log := h.Journal(200, systemd.UnitName)
		t.Logf("the unit's journal, its end:\n%s", lastLines(log, 6))
		for _, want := range []string{
			"HALT on machine " + h.Name + ": the machine, not the binary, is the problem",
			"Version " + worse.Version() + " failed",
			"the known-good version " + good + " failed too",
			"status=78",
		} {
			if !strings.Contains(log, want) {
				t.Errorf("the unit's journal does not say %q:\n%s", want, log)
			}
		}
		if d := h.StateFile("launcher/decision"); !strings.Contains(d, "halted "+good+" "+worse.Version()+" ") {
			t.Errorf("the launcher's decisions do not end in the halt:\n%s", d)
		}
	})
}

// TestSystemdDriverLiveTests runs the drivers' live tests (those named
// Live, which need MESH_LIVE_MANAGER=1 and a running systemd) inside a
// container of their own, each package's. The unit driver's find a
// packaged unit installed (the web server, from the tree's repository).
// The containers have no network: a web server inside listens on ports
// of their own.
func TestSystemdDriverLiveTests(t *testing.T) {
	requireContainers(t)
	for _, p := range []struct {
		pkg     string
		prepare [][]string // commands run inside first
	}{
		{"./drivers/unit", [][]string{{"apt-get", "install", "-y", systemd.OfflinePackage}}},
		{"./drivers/exec", nil},
	} {
		t.Run(strings.TrimPrefix(p.pkg, "./"), func(t *testing.T) {
			c := boot(t, systemd.Options{Module: true, PrivateNetwork: true})
			for _, cmd := range p.prepare {
				c.MustExec(cmd...)
			}
			res, err := c.GoTest(t, p.pkg, "Live", "MESH_LIVE_MANAGER=1")
			switch {
			case errors.Is(err, systemd.ErrNoPackage), errors.Is(err, systemd.ErrNoTests):
				t.Skipf("nothing to run: %v", err)
			case err != nil:
				t.Fatal(err)
			case res.NoTests:
				t.Skipf("%s has no test matching Live", p.pkg)
			case len(res.Passed) == 0:
				t.Skipf("every live test of %s skipped inside:\n%s", p.pkg, res.Output)
			}
			t.Logf("passed inside %s: %s; skipped: %v", c.Name, strings.Join(res.Passed, ", "), res.Skipped)
		})
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
