package testbeds_test

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
	"github.com/mesh-host/mesh-host/upgrade"
)

// The upgrade proofs: the host built more than once, delivered as release
// archives by ordinary declarations, run by the real launcher script.

var (
	buildsOnce sync.Once
	builds     map[string]string // version → mesh-host binary
	buildsErr  error
)

// hostBuilds builds mesh-host as versions v2 and v3 (bins is "bed"), once
// per test binary, into binDir, which TestMain removes.
func hostBuilds(t testing.TB) map[string]string {
	t.Helper()
	buildsOnce.Do(func() {
		builds = map[string]string{"bed": bins.MeshHost}
		for _, v := range []string{"v2", "v3"} {
			dir := filepath.Join(binDir, v)
			if err := os.Mkdir(dir, 0o755); err != nil {
				buildsErr = err
				return
			}
			b, err := testbeds.Build(dir, v)
			if err != nil {
				buildsErr = err
				return
			}
			builds[v] = b.MeshHost
		}
	})
	if buildsErr != nil {
		t.Fatal(buildsErr)
	}
	return builds
}

// launcher writes the launcher script the package ships into the bed.
func launcher(t testing.TB, b *testbeds.Bed) string {
	t.Helper()
	p := filepath.Join(b.Dir, "launcher")
	if err := os.WriteFile(p, upgrade.Launcher, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// upgradeBed is a bed with one host installed at the first version and
// running under the launcher.
type upgradeBed struct {
	*testbeds.Bed
	h     *testbeds.Host
	first string // the installed version's name
	dir   string // scratch for archives
}

func newUpgradeBed(t *testing.T, env ...string) *upgradeBed {
	t.Helper()
	b := beds(t)
	hostBuilds(t)
	u := &upgradeBed{Bed: b, h: b.AddHost("web-1"), dir: t.TempDir()}
	var err error
	if u.first, err = u.h.Install(bins.MeshHost); err != nil {
		t.Fatal(err)
	}
	u.h.StartLauncher(launcher(t, b), append([]string{"MESH_HOST_RESTART_DELAY=0"}, env...)...)
	u.waitVersion(t, u.first)
	// Revision 1: something to hold, and the first completed reconcile,
	// which confirms the installed version.
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 1, testbeds.Files{"/etc/motd": "hi\n"}))
	testbeds.Eventually(t, 30*time.Second, "the installed version confirms itself", func() error {
		if got := knownGood(t, u.h); got != u.first {
			return fmt.Errorf("known-good is %q", got)
		}
		return nil
	})
	return u
}

// release packs bin as a release archive.
func (u *upgradeBed) release(t *testing.T, bin string) testbeds.Release {
	t.Helper()
	r, err := testbeds.Pack(bin, u.h.Root)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// nodeVersion is the version meshctl nodes reports for web-1.
func (u *upgradeBed) nodeVersion() (string, error) {
	vs, err := u.NodeVersions()
	if err != nil {
		return "", err
	}
	v, ok := vs["web-1"]
	if !ok {
		return "", errors.New("web-1 not listed yet")
	}
	return v, nil
}

// waitVersion waits until the control plane hears web-1 run version.
func (u *upgradeBed) waitVersion(t *testing.T, version string) {
	t.Helper()
	testbeds.Eventually(t, 60*time.Second, "web-1 reports version "+version, func() error {
		got, err := u.nodeVersion()
		if err != nil {
			return err
		}
		if got != version {
			return fmt.Errorf("web-1 reports %q", got)
		}
		return nil
	})
}

// versions lists the version directories on web-1's disk.
func (u *upgradeBed) versions(t *testing.T) []string {
	t.Helper()
	vs, err := upgrade.List(filepath.Join(u.h.Root, testbeds.VersionsDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vs {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	return names
}

func knownGood(t *testing.T, h *testbeds.Host) string {
	t.Helper()
	v, err := upgrade.ReadKnownGood(h.StateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return v
}

func kinds(recs []event.Record, k event.Kind) []event.Record {
	var out []event.Record
	for _, r := range recs {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

// TestDeliveredVersionRunsAndIsReported: a second version declared to a
// host running the first: the host stands aside between reconciles, the
// launcher starts the second, and the control plane hears it named.
func TestDeliveredVersionRunsAndIsReported(t *testing.T) {
	u := newUpgradeBed(t)
	v2 := u.release(t, builds["v2"])
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 2, testbeds.Files{"/etc/motd": "hi\n"}, v2.ArchiveYAML()), "--wait", "0")
	u.waitVersion(t, v2.Version())

	recs := u.h.Records()
	aside := kinds(recs, event.VersionStoodAside)
	if len(aside) != 1 {
		t.Fatalf("%d version.stood-aside records, want 1", len(aside))
	}
	var started []string
	for _, r := range kinds(recs, event.HostStarted) {
		var p event.HostStartedPayload
		_ = json.Unmarshal(r.Payload, &p)
		started = append(started, p.Version)
	}
	if len(started) != 2 || started[0] != u.first || started[1] != v2.Version() {
		t.Errorf("host.started versions %v, want [%s %s]", started, u.first, v2.Version())
	}
	testbeds.Eventually(t, 30*time.Second, "the second version confirms itself", func() error {
		if got := knownGood(t, u.h); got != v2.Version() {
			return fmt.Errorf("known-good is %q", got)
		}
		return nil
	})
	// Both stay: the running one and its predecessor.
	if got, want := u.versions(t), sorted(u.first, v2.Version()); !slices.Equal(got, want) {
		t.Errorf("versions on disk %v, want %v", got, want)
	}
	if !u.h.Running() {
		t.Errorf("the launcher exited:\n%s", u.h.Log())
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// TestStandsAsideOnlyAfterTheApplyInFlight: a version delivered in the same
// declaration as a large apply: the apply completes and is journaled, and
// only then does the host stand aside.
func TestStandsAsideOnlyAfterTheApplyInFlight(t *testing.T) {
	u := newUpgradeBed(t)
	v2 := u.release(t, builds["v2"])
	files := testbeds.Files{}
	for i := range 1000 {
		files[fmt.Sprintf("/etc/app/f%04d.conf", i)] = fmt.Sprintf("file %d\n", i)
	}
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 2, files, v2.ArchiveYAML()), "--wait", "0")
	u.waitVersion(t, v2.Version())

	recs := u.h.Records()
	var completed, aside uint64
	for _, r := range recs {
		switch r.Kind {
		case event.ReconcileCompleted:
			var p event.ReconcileCompletedPayload
			_ = json.Unmarshal(r.Payload, &p)
			if p.Revision == 2 && completed == 0 {
				completed = r.Seq
			}
		case event.VersionStoodAside:
			if aside == 0 {
				aside = r.Seq
			}
		}
	}
	if completed == 0 || aside == 0 || aside < completed {
		t.Fatalf("revision 2 completed at #%d, stood aside at #%d: the apply must finish first", completed, aside)
	}
	// Nothing was cut short: every file is there, nothing is pending.
	for _, r := range recs[:aside] {
		if r.Kind == event.ResourceApplied && strings.Contains(string(r.Payload), `"failed"`) {
			t.Errorf("an outcome failed before standing aside: %+v", r)
		}
	}
	if got := readRoot(t, u.h, "etc/app/f0999.conf"); got != "file 999\n" {
		t.Errorf("the last file holds %q", got)
	}
}

// TestNewestIsTheLastArrived: two versions delivered whose names sort the
// other way round: the one that arrived last runs.
func TestNewestIsTheLastArrived(t *testing.T) {
	u := newUpgradeBed(t)
	// Versions are named by digest (only a release archive writes in the
	// versions directory): the one whose name sorts last arrives first.
	first, last := u.release(t, builds["v2"]), u.release(t, builds["v3"])
	if first.Version() < last.Version() {
		first, last = last, first
	}
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 2, nil, first.ArchiveYAML()), "--wait", "0")
	u.waitVersion(t, first.Version())
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 3, nil, first.ArchiveYAML(), last.ArchiveYAML()), "--wait", "0")
	u.waitVersion(t, last.Version())
	newest, ok, err := upgrade.Newest(filepath.Join(u.h.Root, testbeds.VersionsDir))
	if err != nil || !ok || newest.Name != last.Version() {
		t.Errorf("upgrade.Newest = %+v, %v, %v; want %s, which sorts first but arrived last", newest, ok, err, last.Version())
	}
}

// TestConfirmedVersionRetiresAllButItsPredecessor: after the third version
// confirms, the first is gone and the second (its predecessor) is kept.
func TestConfirmedVersionRetiresAllButItsPredecessor(t *testing.T) {
	u := newUpgradeBed(t)
	v2, v3 := u.release(t, builds["v2"]), u.release(t, builds["v3"])
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 2, nil, v2.ArchiveYAML()), "--wait", "0")
	u.waitVersion(t, v2.Version())
	testbeds.Eventually(t, 30*time.Second, "v2 is known-good", func() error {
		if got := knownGood(t, u.h); got != v2.Version() {
			return fmt.Errorf("known-good %q", got)
		}
		return nil
	})
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 3, nil, v3.ArchiveYAML()), "--wait", "0")
	u.waitVersion(t, v3.Version())
	testbeds.Eventually(t, 30*time.Second, "v3 confirms and retires v1", func() error {
		if got := knownGood(t, u.h); got != v3.Version() {
			return fmt.Errorf("known-good %q", got)
		}
		if got, want := u.versions(t), sorted(v2.Version(), v3.Version()); !slices.Equal(got, want) {
			return fmt.Errorf("versions on disk %v, want %v", got, want)
		}
		return nil
	})
	// Asserted on the directory itself, not only through List.
	entries, err := os.ReadDir(filepath.Join(u.h.Root, testbeds.VersionsDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := sorted(v2.Version(), v3.Version()); !slices.Equal(sorted(names...), want) {
		t.Errorf("%s holds %v, want %v", testbeds.VersionsDir, names, want)
	}
	if len(kinds(u.h.Records(), event.VersionRetired)) != 1 {
		t.Errorf("want one version.retired record")
	}
}

// badVersion writes a "version" that fails at once, as a build that cannot
// start on this machine would.
func badVersion(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "bad-mesh-host")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'this build cannot start here' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFailingVersionIsRolledBackOnce: a version that exits 1 on start is
// tried to the limit, then the known-good one runs again, and the host
// journals the launcher's decision. No package manager is involved.
func TestFailingVersionIsRolledBackOnce(t *testing.T) {
	u := newUpgradeBed(t)
	bad := u.release(t, badVersion(t, u.dir))
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 2, nil, bad.ArchiveYAML()), "--wait", "0")
	testbeds.Eventually(t, 60*time.Second, "the rollback is journaled", func() error {
		if !u.h.Running() {
			return testbeds.Fatal(fmt.Errorf("the launcher exited:\n%s", u.h.Log()))
		}
		r := u.h.Run("journal", "--kind", string(event.VersionRolledBack), "--json")
		recs, _ := testbeds.DecodeRecords(r.Stdout)
		if len(recs) == 0 {
			return errors.New("no version.rolled-back yet")
		}
		var p event.VersionRolledBackPayload
		_ = json.Unmarshal(recs[0].Payload, &p)
		if p.From != bad.Version() || p.To != u.first {
			return testbeds.Fatal(fmt.Errorf("rolled back %+v, want from %s to %s", p, bad.Version(), u.first))
		}
		return nil
	})
	u.waitVersion(t, u.first)
	if got := knownGood(t, u.h); got != u.first {
		t.Errorf("known-good is %q after the rollback", got)
	}
	// Once: the bad version is not started again while it is the newest.
	starts := strings.Count(u.h.Log(), "this build cannot start here")
	time.Sleep(2 * time.Second) // a launcher looping on it would show in this window
	if again := strings.Count(u.h.Log(), "this build cannot start here"); again != starts {
		t.Errorf("the bad version was started again after the rollback (%d → %d starts)", starts, again)
	}
	// Upward, it looks failed: nodes says rolled back, status marks the
	// version bad, and the node's report still agrees with its records.
	testbeds.Eventually(t, 30*time.Second, "nodes says rolled back", func() error {
		out := u.MustMeshctl("nodes")
		if !strings.Contains(out, "rolled back: release "+bad.Version()[:12]+" failed to start") {
			return fmt.Errorf("nodes:\n%s", out)
		}
		return nil
	})
	if out := u.MustMeshctl("status", "web-1"); !strings.Contains(out, bad.Version()+" (bad: rolled back from)") {
		t.Errorf("status does not mark the bad version:\n%s", out)
	}
	testbeds.Eventually(t, 30*time.Second, "replay --verify agrees after a release and a rollback", func() error {
		r := u.Meshctl("replay", "web-1", "--verify")
		if r.Code != 0 || !strings.Contains(r.Stdout, "matches what web-1 reported") {
			return errors.New(r.String())
		}
		return nil
	})
}

// TestFailedReleaseLooksFailed: meshctl release of a build that cannot
// start waits, sees the node's launcher roll it back, and exits non-zero
// naming the node and the launcher's reason.
func TestFailedReleaseLooksFailed(t *testing.T) {
	u := newUpgradeBed(t)
	bad := u.release(t, badVersion(t, u.dir))
	r := u.Meshctl("release", bad.Path, "--nodes", "web-1", "--wait", "90s")
	t.Logf("release: %s", r)
	if r.Code == 0 {
		t.Fatalf("meshctl release of a build that cannot start exited 0")
	}
	for _, want := range []string{"web-1: release rolled back: web-1's launcher rolled release " + bad.Version()[:12] + " back",
		"failed 3 starts in a row", "rolled back on 1 of 1 nodes: web-1"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("release does not say %q", want)
		}
	}
	if out := u.MustMeshctl("nodes"); !strings.Contains(out, "rolled back") {
		t.Errorf("nodes:\n%s", out)
	}
}

// TestPredecessorFailingTooHaltsNamingTheMachine: when the known-good
// version fails as well, the launcher halts with status 78 and says the
// machine is the problem, naming both versions.
func TestPredecessorFailingTooHaltsNamingTheMachine(t *testing.T) {
	u := newUpgradeBed(t, "MESH_HOST_RESTART_DELAY=1")
	bad := u.release(t, badVersion(t, u.dir))
	u.MustMeshctl("declare", "web-1", u.Declare("web-1", 2, nil, bad.ArchiveYAML()), "--wait", "0")
	// While the bad version fails its first starts, the machine breaks,
	// so that no version can start.
	testbeds.Eventually(t, 30*time.Second, "the bad version has failed once", func() error {
		version, count, err := upgrade.Failures(u.h.StateDir)
		if err != nil || version != bad.Version() || count < 1 {
			return fmt.Errorf("failures: %q %d %v", version, count, err)
		}
		return nil
	})
	// The machine breaks: a directory where the journal was. (Not a
	// damaged journal, on which the launcher halts at once: see
	// TestDamagedJournalHaltsAtOnce.)
	journalPath := filepath.Join(u.h.StateDir, "journal.db")
	if err := os.Remove(journalPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(journalPath, 0o700); err != nil {
		t.Fatal(err)
	}
	code, err := u.h.Wait(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != upgrade.HaltStatus {
		t.Fatalf("the launcher exited %d, want %d:\n%s", code, upgrade.HaltStatus, u.h.Log())
	}
	// The halt is left for the next start to journal, once the machine is
	// fixed.
	ds, err := upgrade.Decisions(u.h.StateDir)
	if err != nil || len(ds) == 0 || ds[len(ds)-1].Verb != upgrade.VerbHalted || ds[len(ds)-1].From != u.first || ds[len(ds)-1].To != bad.Version() {
		t.Errorf("launcher decisions %+v (%v); want the halt of %s after %s last", ds, err, u.first, bad.Version())
	}
	host, _ := os.Hostname()
	log := u.h.Log()
	for _, want := range []string{host, bad.Version(), u.first, "machine"} {
		if !strings.Contains(log, want) {
			t.Errorf("the halt message does not name %q:\n%s", want, log[max(0, len(log)-2000):])
		}
	}
}

// TestDamagedJournalHaltsAtOnce: a host that finds its journal damaged
// exits 4, and the launcher halts at once, real processes end to end: the
// version is not at fault, so none is marked bad or rolled back to.
func TestDamagedJournalHaltsAtOnce(t *testing.T) {
	u := newUpgradeBed(t)
	kids, err := testbeds.HostChildren(u.h.PID())
	if err != nil || len(kids) != 1 {
		t.Fatalf("the launcher's children: %v, %v", kids, err)
	}
	// The disk fails under the running host: every byte of the journal
	// is lost. The host dies with it; the launcher starts it again.
	path := filepath.Join(u.h.StateDir, "journal.db")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, fi.Size()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(kids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	code, err := u.h.Wait(60 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code != upgrade.HaltStatus {
		t.Fatalf("the launcher exited %d, want %d:\n%s", code, upgrade.HaltStatus, u.h.Log())
	}
	ds, err := upgrade.Decisions(u.h.StateDir)
	if err != nil || len(ds) != 1 || ds[0].Verb != upgrade.VerbHalted || ds[0].ExitCode != upgrade.DamagedStatus || ds[0].From != u.first {
		t.Errorf("launcher decisions %+v (%v); want one halt of %s with exit code %d", ds, err, u.first, upgrade.DamagedStatus)
	}
	if bad, _ := os.ReadFile(filepath.Join(u.h.StateDir, upgrade.LauncherDir, upgrade.BadFile)); len(bad) != 0 {
		t.Errorf("a version was marked bad: %q", bad)
	}
	log := u.h.Log()
	for _, want := range []string{"journal is corrupt", "found the journal damaged", "none is rolled back"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log[max(0, len(log)-3000):])
		}
	}
}

// TestKilledMidUpgradeLeavesOneRunnableNewest: the host is killed with
// SIGKILL at random moments of one upgrade after another (delivery,
// standing aside, the new version's start, its confirmation, retirement).
// After each kill the disk holds a runnable newest version and a
// known-good record naming a version that is there, and the mesh goes on.
func TestKilledMidUpgradeLeavesOneRunnableNewest(t *testing.T) {
	u := newUpgradeBed(t)
	v2 := u.release(t, builds["v2"])
	versionsDir := filepath.Join(u.h.Root, testbeds.VersionsDir)
	check := func(round int) {
		t.Helper()
		newest, ok, err := upgrade.Newest(versionsDir)
		if err != nil || !ok {
			t.Fatalf("round %d: no newest version (%v)", round, err)
		}
		if fi, err := os.Stat(newest.Executable()); err != nil || fi.Mode()&0o111 == 0 {
			t.Fatalf("round %d: the newest version %s is not runnable: %v", round, newest.Name, err)
		}
		good := knownGood(t, u.h)
		if good == "" {
			t.Fatalf("round %d: no known-good record", round)
		}
		if _, err := upgrade.Lookup(versionsDir, good); err != nil {
			t.Fatalf("round %d: known-good %s is not a version on disk: %v", round, good, err)
		}
	}
	// A release of its own each round (only a release archive, at
	// ${version}, may write in the versions directory): the same binary,
	// packed again until its digest is new.
	seen := map[string]bool{v2.Digest: true}
	var last string
	for round := range 8 {
		r := u.release(t, builds["v2"])
		for seen[r.Digest] {
			time.Sleep(time.Second) // tar keeps the file's mtime, in seconds
			r = u.release(t, builds["v2"])
		}
		seen[r.Digest] = true
		name, archive := r.Version(), r.ArchiveYAML()
		last = name
		u.MustMeshctl("declare", "web-1", u.Declare("web-1", uint64(round+2), nil, archive), "--wait", "0")
		time.Sleep(time.Duration(round*80) * time.Millisecond) // a different step each round
		kids, err := testbeds.HostChildren(u.h.PID())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			_ = syscallKill(k)
		}
		t.Logf("round %d: killed %v %s after declaring %s", round, kids, time.Duration(round*80)*time.Millisecond, name)
		// The launcher starts a host again; once it serves and has
		// completed a reconcile (so the kill is no longer counted as a
		// failed start: three kills of starts that never got that far
		// would rightly halt the launcher), look.
		testbeds.Eventually(t, 60*time.Second, "a host serves again", func() error {
			if !u.h.Running() {
				return testbeds.Fatal(fmt.Errorf("the launcher exited:\n%s", u.h.Log()))
			}
			if r := u.h.Run("status"); r.Code != 0 {
				return errors.New(r.String())
			}
			if _, n, err := upgrade.Failures(u.h.StateDir); err != nil || n != 0 {
				return fmt.Errorf("%d failed starts counted (%v)", n, err)
			}
			return nil
		})
		check(round)
	}
	// Left alone, the last delivery runs and confirms.
	testbeds.Eventually(t, 60*time.Second, "the last version runs and confirms", func() error {
		if got := knownGood(t, u.h); got != last {
			return fmt.Errorf("known-good %q", got)
		}
		return nil
	})
	check(8)
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
