package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/upgrade"
	"github.com/mesh-host/mesh-host/upgrade/upgradetest"
)

// versionBed is a versions directory, a state directory and a journal, and
// a hostVersion running one of the versions, as a fresh process would.
type versionBed struct {
	t         *testing.T
	versions  string
	state     string
	journal   string
	j         *journal.Journal
	hv        *hostVersion
	running   string
	abandoned []*journal.Journal
}

func newVersionBed(t *testing.T) *versionBed {
	dir := t.TempDir()
	b := &versionBed{t: t, versions: filepath.Join(dir, "versions"), state: filepath.Join(dir, "state")}
	b.journal = filepath.Join(b.state, "journal.db")
	if err := os.MkdirAll(b.versions, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b.j != nil {
			b.j.Close()
		}
	})
	return b
}

// start is a process start of version name: host.started, then atStart.
func (b *versionBed) start(name string) *hostVersion {
	b.t.Helper()
	if b.j != nil {
		b.j.Close()
	}
	j, err := hostjournal.Open(b.journal)
	if err != nil {
		b.t.Fatal(err)
	}
	b.j = j
	v, err := upgrade.Lookup(b.versions, name)
	if err != nil {
		b.t.Fatal(err)
	}
	b.hv = &hostVersion{build: "dev", dir: b.versions, stateDir: b.state, managed: true, running: v,
		log: slog.New(slog.DiscardHandler)}
	if _, err := j.Append(event.New(event.HostStarted, 0, "", b.hv.startedPayload())); err != nil {
		b.t.Fatal(err)
	}
	if err := b.hv.atStart(j); err != nil {
		b.t.Fatal(err)
	}
	return b.hv
}

// records are the journal's records of kind.
func (b *versionBed) records(kind event.Kind) []event.Record {
	b.t.Helper()
	var out []event.Record
	if err := b.j.ScanKind(kind, 1, func(r event.Record) error { out = append(out, r); return nil }); err != nil {
		b.t.Fatal(err)
	}
	return out
}

func (b *versionBed) payloadVersions(kind event.Kind) []string {
	b.t.Helper()
	out := []string{}
	for _, r := range b.records(kind) {
		var p event.VersionPayload
		if err := json.Unmarshal(r.Payload, &p); err != nil {
			b.t.Fatal(err)
		}
		out = append(out, p.Version)
	}
	return out
}

func (b *versionBed) knownGood() string {
	b.t.Helper()
	kg, err := upgrade.ReadKnownGood(b.state)
	if err != nil {
		b.t.Fatal(err)
	}
	return kg
}

func wantStrings(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: got %v, want %v", what, got, want)
	}
}

// TestConfirmRecordsAndRetires: the first completed reconcile confirms the
// running version, retires what is older than its predecessor (the
// previous known-good), keeps the predecessor, and records itself.
func TestConfirmRecordsAndRetires(t *testing.T) {
	b := newVersionBed(t)
	// Names sorting against the arrival order.
	for i, n := range []string{"v9", "v8", "v7", "v6"} {
		upgradetest.PlaceVersion(t, b.versions, n, uint64(i+1), "")
	}
	if err := upgrade.WriteKnownGood(b.state, "v7"); err != nil {
		t.Fatal(err)
	}
	hv := b.start("v6")
	wantStrings(t, "delivered", b.payloadVersions(event.VersionDelivered), "v9", "v8", "v7", "v6")
	if aside, err := hv.between(false); aside != nil || err != nil {
		t.Fatalf("before a completed reconcile: aside %+v, err %v", aside, err)
	}
	wantStrings(t, "confirmed before a completed reconcile", b.payloadVersions(event.VersionConfirmed))
	if aside, err := hv.between(true); aside != nil || err != nil {
		t.Fatalf("aside %+v, err %v", aside, err)
	}
	wantStrings(t, "confirmed", b.payloadVersions(event.VersionConfirmed), "v6")
	wantStrings(t, "retired", b.payloadVersions(event.VersionRetired), "v9", "v8")
	wantStrings(t, "on disk", upgradetest.VersionNames(t, b.versions), "v7", "v6")
	if kg := b.knownGood(); kg != "v6" {
		t.Errorf("known-good record %q, want v6", kg)
	}
	s, _, _ := hostjournal.StoredState(b.j)
	if s.KnownGood != "v6" || !slices.Equal(s.Versions, []string{"v7", "v6"}) {
		t.Errorf("projection: known-good %q, versions %v", s.KnownGood, s.Versions)
	}
	// Later reconciles change nothing.
	for range 3 {
		hv.between(true)
	}
	wantStrings(t, "confirmed", b.payloadVersions(event.VersionConfirmed), "v6")

	// The next start of the same version confirms nothing again.
	hv = b.start("v6")
	hv.between(true)
	wantStrings(t, "confirmed after a restart", b.payloadVersions(event.VersionConfirmed), "v6")
}

// TestConfirmWithoutKnownGood: with no known-good version anywhere, the
// predecessor is the newest version older than the running one.
func TestConfirmWithoutKnownGood(t *testing.T) {
	b := newVersionBed(t)
	for i, n := range []string{"c", "b", "a"} {
		upgradetest.PlaceVersion(t, b.versions, n, uint64(i+1), "")
	}
	hv := b.start("a")
	hv.between(true)
	wantStrings(t, "on disk", upgradetest.VersionNames(t, b.versions), "b", "a")
	if kg := b.knownGood(); kg != "a" {
		t.Errorf("known-good %q", kg)
	}
}

var errKilled = errors.New("killed")

// TestConfirmKilledAtEachStep: confirming stopped after any of its steps
// (as by kill -9: the later steps not done) leaves the newest version
// runnable and a known-good record naming a version on disk; the next
// start finishes the job, journaling nothing twice.
func TestConfirmKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"confirmed", "retired", "recorded", "mid-retire"} {
		t.Run(step, func(t *testing.T) {
			b := newVersionBed(t)
			for i, n := range []string{"old1", "old2", "pred", "run"} {
				upgradetest.PlaceVersion(t, b.versions, n, uint64(i+1), "")
			}
			upgrade.WriteKnownGood(b.state, "pred")
			hv := b.start("run")
			if step == "mid-retire" {
				// The kill landed inside Retire: old1 renamed aside and
				// half removed, old2 untouched.
				hv.step = func(s string) error {
					if s == "confirmed" {
						os.Rename(filepath.Join(b.versions, "old1"), filepath.Join(b.versions, upgrade.RetiringPrefix+"old1"))
						os.Remove(filepath.Join(b.versions, upgrade.RetiringPrefix+"old1", upgrade.Executable))
						return errKilled
					}
					return nil
				}
			} else {
				hv.step = func(s string) error {
					if s == step {
						return errKilled
					}
					return nil
				}
			}
			if _, err := hv.between(true); !errors.Is(err, errKilled) {
				t.Fatalf("got %v, want the kill", err)
			}
			// What a launcher would find now.
			vs, _ := upgrade.List(b.versions)
			if newest := vs[len(vs)-1]; newest.Name != "run" {
				t.Fatalf("newest after the kill: %s", newest.Name)
			}
			kg := b.knownGood()
			if kg != "pred" && kg != "run" {
				t.Fatalf("known-good after the kill: %q", kg)
			}
			if _, err := upgrade.Lookup(b.versions, kg); err != nil {
				t.Fatalf("the known-good version is not runnable after the kill: %v", err)
			}

			// The next start.
			hv = b.start("run")
			if _, err := hv.between(true); err != nil {
				t.Fatal(err)
			}
			wantStrings(t, "on disk", upgradetest.VersionNames(t, b.versions), "pred", "run")
			if entries, _ := os.ReadDir(b.versions); len(entries) != 2 {
				t.Errorf("%d entries in the versions directory, want 2", len(entries))
			}
			if kg := b.knownGood(); kg != "run" {
				t.Errorf("known-good %q, want run", kg)
			}
			wantStrings(t, "confirmed", b.payloadVersions(event.VersionConfirmed), "run")
			s, _, _ := hostjournal.StoredState(b.j)
			if s.KnownGood != "run" || !slices.Equal(s.Versions, []string{"pred", "run"}) {
				t.Errorf("projection: known-good %q, versions %v", s.KnownGood, s.Versions)
			}
			retired := b.payloadVersions(event.VersionRetired)
			slices.Sort(retired)
			wantStrings(t, "retired", retired, "old1", "old2")
		})
	}
}

// TestStandAsideForTheLaunchersChoice: a newer version makes the host
// stand aside; one the launcher rolled back from does not, until a newer
// one arrives.
func TestStandAsideForTheLaunchersChoice(t *testing.T) {
	b := newVersionBed(t)
	upgradetest.PlaceVersion(t, b.versions, "one", 1, "")
	hv := b.start("one")
	for range 5 {
		if aside, err := hv.between(true); aside != nil || err != nil {
			t.Fatalf("alone: aside %+v, err %v", aside, err)
		}
	}
	// A rolled-back version: the launcher runs the known-good one instead.
	upgradetest.PlaceVersion(t, b.versions, "two", 2, "")
	os.MkdirAll(filepath.Join(b.state, upgrade.LauncherDir), 0o700)
	if err := os.WriteFile(filepath.Join(b.state, upgrade.LauncherDir, upgrade.BadFile), []byte("two 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if aside, err := hv.between(false); aside != nil || err != nil {
		t.Fatalf("with the newest marked bad: aside %+v, err %v", aside, err)
	}
	upgradetest.PlaceVersion(t, b.versions, "three", 3, "")
	aside, err := hv.between(false)
	if err != nil || aside == nil || aside.Running != "one" || aside.Newer != "three" {
		t.Fatalf("with a newer version: aside %+v, err %v", aside, err)
	}
	wantStrings(t, "delivered", b.payloadVersions(event.VersionDelivered), "one", "two", "three")
}

// TestLauncherDecisionsJournaled: the launcher's decisions become
// version.rolled-back records, and the file goes.
func TestLauncherDecisionsJournaled(t *testing.T) {
	b := newVersionBed(t)
	upgradetest.PlaceVersion(t, b.versions, "good", 1, "")
	ldir := filepath.Join(b.state, upgrade.LauncherDir)
	os.MkdirAll(ldir, 0o700)
	os.WriteFile(filepath.Join(ldir, upgrade.DecisionFile), []byte("rolled-back bad good 1 bad failed 3 starts in a row, the last with exit code 1\n"+
		"halted good bad 2 HALT on machine m: the machine, not the binary, is the problem.\n"), 0o644)
	b.start("good")
	rs := b.records(event.VersionRolledBack)
	if len(rs) != 1 {
		t.Fatalf("%d version.rolled-back records", len(rs))
	}
	var p event.VersionRolledBackPayload
	json.Unmarshal(rs[0].Payload, &p)
	if p != (event.VersionRolledBackPayload{From: "bad", To: "good", Reason: "bad failed 3 starts in a row, the last with exit code 1"}) {
		t.Errorf("got %+v", p)
	}
	hs := b.records(event.VersionHalted)
	if len(hs) != 1 {
		t.Fatalf("%d version.halted records", len(hs))
	}
	var h event.VersionHaltedPayload
	json.Unmarshal(hs[0].Payload, &h)
	if h != (event.VersionHaltedPayload{Failed: "good", Other: "bad", ExitCode: 2, Reason: "HALT on machine m: the machine, not the binary, is the problem."}) {
		t.Errorf("got %+v", h)
	}
	if _, err := os.Stat(filepath.Join(ldir, upgrade.DecisionFile)); !os.IsNotExist(err) {
		t.Errorf("the decision file is still there: %v", err)
	}
	b.start("good")
	if rs := b.records(event.VersionRolledBack); len(rs) != 1 {
		t.Errorf("journaled again: %d records", len(rs))
	}
}

// TestFirstReconcileClearsFailures: a start that completed a reconcile is
// not a failed start.
func TestFirstReconcileClearsFailures(t *testing.T) {
	b := newVersionBed(t)
	upgradetest.PlaceVersion(t, b.versions, "v", 1, "")
	ldir := filepath.Join(b.state, upgrade.LauncherDir)
	os.MkdirAll(ldir, 0o700)
	os.WriteFile(filepath.Join(ldir, upgrade.FailuresFile), []byte("v 2\n"), 0o644)
	hv := b.start("v")
	hv.between(false)
	if v, n, _ := upgrade.Failures(b.state); v != "v" || n != 2 {
		t.Fatalf("cleared before a completed reconcile: %q %d", v, n)
	}
	hv.between(true)
	if v, n, _ := upgrade.Failures(b.state); v != "" || n != 0 {
		t.Fatalf("not cleared: %q %d", v, n)
	}
}

func TestReleaseVersions(t *testing.T) {
	release := ReleaseVersions("/opt/mesh-host/versions/")
	for id, want := range map[string]bool{
		"archive:/opt/mesh-host/versions/abc":   true,
		"archive:/opt/mesh-host/versions/abc/":  true,
		"archive:/opt/mesh-host/versions":       false,
		"archive:/opt/mesh-host/versions/a/b":   false,
		"archive:/opt/mesh-host/other/abc":      false,
		"directory:/opt/mesh-host/versions/abc": false,
		"file:/opt/mesh-host/versions/abc":      false,
	} {
		if got := release(id); got != want {
			t.Errorf("release(%s) = %v, want %v", id, got, want)
		}
	}
}

// TestLoopLooksOnlyBetweenReconciles: between runs after a reconcile
// returns and on a look, never while one is in flight; its error ends the
// loop.
func TestLoopLooksOnlyBetweenReconciles(t *testing.T) {
	c := &Config{DriftInterval: time.Hour, StopTimeout: time.Hour}
	p := newLoopProbe()
	var inFlight atomic.Bool
	look := make(chan struct{}, 1)
	calls := make(chan bool, 10)
	var stand atomic.Bool
	reconcile := func(ctx context.Context, tr event.Trigger) (*agent.Result, error) {
		inFlight.Store(true)
		defer inFlight.Store(false)
		return p.reconcile(ctx, tr)
	}
	between := func(completed bool) error {
		if inFlight.Load() {
			t.Error("between called during a reconcile")
		}
		calls <- completed
		if stand.Load() {
			return errStoodAside
		}
		return nil
	}
	wake := make(chan event.Trigger, 1)
	out := make(chan error, 1)
	go func() {
		out <- c.reconcileLoop(context.Background(), loopHooks{wake: wake, reconcile: reconcile, done: func() {}, between: between, look: look},
			slog.New(slog.DiscardHandler))
	}()
	recv(t, p.started, "the start reconcile")
	look <- struct{}{} // a look asked for during the reconcile waits for it
	select {
	case <-calls:
		t.Fatal("between during the start reconcile")
	case <-time.After(50 * time.Millisecond):
	}
	p.release <- struct{}{}
	if completed := recv(t, calls, "between after the reconcile"); !completed {
		t.Error("between after a completed reconcile was told it did not complete")
	}
	if completed := recv(t, calls, "the look"); completed {
		t.Error("a look was told a reconcile completed")
	}
	// A delivery during the next reconcile: the stand-aside comes after it.
	wake <- event.TriggerPushed
	recv(t, p.started, "the pushed reconcile")
	stand.Store(true)
	select {
	case err := <-out:
		t.Fatalf("the loop returned (%v) with a reconcile in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	p.release <- struct{}{}
	recv(t, calls, "between after the pushed reconcile")
	if err := recv(t, out, "the loop to end"); !errors.Is(err, errStoodAside) {
		t.Fatalf("got %v, want errStoodAside", err)
	}
}

// TestLoopWithAnUnchangedBinaryNeverStandsAside: hundreds of reconciles,
// each followed by the real between of this (unchanged, unmanaged) test
// binary: the loop never ends.
func TestLoopWithAnUnchangedBinaryNeverStandsAside(t *testing.T) {
	dir := t.TempDir()
	hv := resolveVersion("dev", dir, upgrade.DefaultVersionsDir, dir, slog.New(slog.DiscardHandler))
	if hv.self == nil || hv.managed {
		t.Fatalf("the test binary: self %v, managed %v", hv.self, hv.managed)
	}
	c := &Config{DriftInterval: time.Millisecond, StopTimeout: time.Second}
	ctx, stop := context.WithCancel(context.Background())
	var n atomic.Int64
	out := make(chan error, 1)
	go func() {
		out <- c.reconcileLoop(ctx, loopHooks{
			reconcile: func(context.Context, event.Trigger) (*agent.Result, error) { n.Add(1); return &agent.Result{}, nil },
			done:      func() {},
			between: func(completed bool) error {
				aside, err := hv.between(completed)
				if err != nil {
					t.Error(err)
				}
				if aside != nil {
					return fmt.Errorf("stood aside: %+v", *aside)
				}
				return nil
			},
		}, slog.New(slog.DiscardHandler))
	}()
	deadline := time.Now().Add(20 * time.Second)
	for n.Load() < 500 && time.Now().Before(deadline) {
		select {
		case err := <-out:
			t.Fatalf("the loop ended after %d reconciles: %v", n.Load(), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	stop()
	if err := recv(t, out, "the loop to end"); err != nil {
		t.Fatalf("after %d reconciles: %v", n.Load(), err)
	}
	if n.Load() < 500 {
		t.Fatalf("only %d reconciles in 20 s", n.Load())
	}
}
