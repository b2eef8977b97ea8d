package upgrade_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/upgrade"
)

// Bodies of fake versions: shell scripts that log their start (name and
// arguments) to $LAUNCHER_TEST_LOG, then do this.
const (
	// stop ends the test: it asks the launcher (its parent) to stop.
	stop   = `kill -TERM "$PPID"; exit 0`
	fail1  = `exit 1`
	fail2  = `exit 2`
	ok0    = `exit 0`
	logEnv = "LAUNCHER_TEST_LOG"
)

// shells are the shells the launcher is run with: sh, and bash and
// busybox as POSIX shells where they are installed.
func shells(t *testing.T) [][]string {
	out := [][]string{{"sh"}}
	if _, err := exec.LookPath("bash"); err == nil {
		out = append(out, []string{"bash", "--posix"})
	}
	if _, err := exec.LookPath("busybox"); err == nil {
		out = append(out, []string{"busybox", "sh"})
	}
	return out
}

// eachShell runs f under each shell.
func eachShell(t *testing.T, f func(t *testing.T, b *launcherBed)) {
	for _, sh := range shells(t) {
		t.Run(strings.Join(sh, "-"), func(t *testing.T) {
			t.Parallel()
			f(t, newLauncherBed(t, sh))
		})
	}
}

// launcherBed is a versions directory, a state directory and the launcher
// script (the embedded copy), in a temporary directory.
type launcherBed struct {
	t                            *testing.T
	shell                        []string
	dir, versions, state, script string
	log                          string
	env                          []string
}

func newLauncherBed(t *testing.T, shell []string) *launcherBed {
	dir := t.TempDir()
	b := &launcherBed{
		t: t, shell: shell, dir: dir,
		versions: filepath.Join(dir, "versions"),
		state:    filepath.Join(dir, "state"),
		script:   filepath.Join(dir, "launcher"),
		log:      filepath.Join(dir, "starts.log"),
	}
	if err := os.WriteFile(b.script, upgrade.Launcher, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(b.versions, 0o755); err != nil {
		t.Fatal(err)
	}
	b.env = []string{"MESH_HOST_VERSIONS=" + b.versions, "MESH_HOST_STATE_DIR=" + b.state, "MESH_HOST_RESTART_DELAY=0", logEnv + "=" + b.log}
	return b
}

// version delivers a fake version that logs its start and runs body.
func (b *launcherBed) version(name string, counter uint64, body string) string {
	b.t.Helper()
	return deliver(b.t, b.versions, name, counter, `printf '%s\n' "$(basename "$(dirname "$0")") $*" >>"$`+logEnv+`"`+"\n"+body)
}

func (b *launcherBed) knownGood(name string) {
	b.t.Helper()
	if err := upgrade.WriteKnownGood(b.state, name); err != nil {
		b.t.Fatal(err)
	}
}

// run runs the launcher to its end and returns its exit code and stderr.
func (b *launcherBed) run(extraEnv []string, args ...string) (int, string) {
	b.t.Helper()
	cmd, stderr := b.start(extraEnv, args...)
	return b.wait(cmd, stderr)
}

func (b *launcherBed) start(extraEnv []string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	b.t.Helper()
	argv := append(append(append([]string{}, b.shell[1:]...), b.script), args...)
	cmd := exec.Command(b.shell[0], argv...)
	cmd.Env = append(append(os.Environ(), b.env...), extraEnv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	return cmd, &stderr
}

func (b *launcherBed) wait(cmd *exec.Cmd, stderr *bytes.Buffer) (int, string) {
	b.t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		b.t.Fatalf("the launcher still runs after 60 s; it said:\n%s\nstarts: %v", stderr, b.starts())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// starts are the logged starts, one "NAME ARGS..." each.
func (b *launcherBed) starts() []string {
	s := strings.TrimSpace(readFile(b.t, b.log))
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// started is the names of the versions started, in order.
func (b *launcherBed) started() string {
	var out []string
	for _, l := range b.starts() {
		n, _, _ := strings.Cut(l, " ")
		out = append(out, n)
	}
	return strings.Join(out, ",")
}

func (b *launcherBed) file(name string) string {
	return strings.TrimSpace(readFile(b.t, filepath.Join(b.state, upgrade.LauncherDir, name)))
}

func wantExit(t *testing.T, code int, stderr string, want int) {
	t.Helper()
	if code != want {
		t.Fatalf("the launcher exited %d, want %d; it said:\n%s", code, want, stderr)
	}
}

// TestLauncherStartsTheNewest: of two deliveries whose names sort the
// other way round, the one that arrived last is started, with the state
// directory, the global flags, "serve" and the serve flags; Go's Newest
// agrees.
func TestLauncherStartsTheNewest(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("zzz", 1, stop)
		b.version("aaa", 2, stop)
		code, stderr := b.run(nil, "--root", "/srv/my root", "--", "--drift-interval", "5m")
		wantExit(t, code, stderr, 0)
		want := "aaa --state-dir " + b.state + " --root /srv/my root serve --drift-interval 5m"
		if s := b.starts(); len(s) != 1 || s[0] != want {
			t.Fatalf("started %q, want [%q]", s, want)
		}
		if v, _, _ := upgrade.Newest(b.versions); v.Name != "aaa" {
			t.Errorf("Go's Newest is %s, the launcher started aaa", v.Name)
		}
		// No arguments: serve alone.
		os.Remove(b.log)
		code, stderr = b.run(nil)
		wantExit(t, code, stderr, 0)
		if s := b.starts(); len(s) != 1 || s[0] != "aaa --state-dir "+b.state+" serve" {
			t.Fatalf("started %q", s)
		}
	})
}

// TestLauncherStandAsideStartsTheNewer: a host that exits 0 stood aside;
// the launcher starts what is newest now. The newer version is in place
// from the start but has no arrival marker (half-delivered) until the
// running one writes it.
func TestLauncherStandAsideStartsTheNewer(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		next := b.version("b", 2, stop)
		os.Remove(filepath.Join(next, upgrade.ArrivedFile))
		b.version("a", 1, fmt.Sprintf(`printf '2026-01-01T00:00:00.000000000Z 2\n' >%q; exit 0`, filepath.Join(next, upgrade.ArrivedFile)))
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, 0)
		if got := b.started(); got != "a,b" {
			t.Fatalf("started %s, want a,b; the launcher said:\n%s", got, stderr)
		}
		if f := b.file(upgrade.FailuresFile); f != "" {
			t.Errorf("failures %q after clean exits", f)
		}
	})
}

// TestLauncherRollsBackOnce: a never-confirmed version failing its third
// start is given up for the known-good version, started once; the decision
// is recorded for the host, and the failed version is not started again
// while it is the newest, even by a new launcher; a newer one is.
func TestLauncherRollsBackOnce(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("good", 1, stop)
		b.version("broken", 2, fail1)
		b.knownGood("good")
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, 0)
		if got := b.started(); got != "broken,broken,broken,good" {
			t.Fatalf("started %s; the launcher said:\n%s", got, stderr)
		}
		ds, err := upgrade.Decisions(b.state)
		want := upgrade.Decision{Verb: upgrade.VerbRolledBack, From: "broken", To: "good", ExitCode: 1,
			Reason: "broken failed 3 starts in a row, the last with exit code 1"}
		if err != nil || len(ds) != 1 || ds[0] != want {
			t.Fatalf("decisions %+v, %v; want %+v", ds, err, want)
		}
		if v, c, err := upgrade.Bad(b.state); v != "broken" || c != 1 || err != nil {
			t.Errorf("bad: %q %d %v", v, c, err)
		}
		vs, _ := upgrade.List(b.versions)
		if v, _ := upgrade.Pick(vs, "good", "broken"); v.Name != "good" {
			t.Errorf("Go's Pick says %s", v.Name)
		}

		// A new launcher (a restart, a reboot) starts the known-good one.
		os.Remove(b.log)
		code, stderr = b.run(nil)
		wantExit(t, code, stderr, 0)
		if got := b.started(); got != "good" {
			t.Fatalf("after a restart started %s, want good", got)
		}
		// A newer version arrives: it is started, and the mark is forgotten.
		b.version("newer", 3, stop)
		os.Remove(b.log)
		code, stderr = b.run(nil)
		wantExit(t, code, stderr, 0)
		if got := b.started(); got != "newer" {
			t.Fatalf("with a newer version started %s, want newer", got)
		}
		if f := b.file(upgrade.BadFile); f != "" {
			t.Errorf("bad is still %q", f)
		}
	})
}

// TestLauncherHalts: the known-good version failing too after a rollback
// halts with HaltStatus, naming the machine, both versions and both exit
// codes.
func TestLauncherHalts(t *testing.T) {
	host, _ := os.Hostname()
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("good", 1, fail2)
		b.version("broken", 2, fail1)
		b.knownGood("good")
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, upgrade.HaltStatus)
		if got := b.started(); got != "broken,broken,broken,good" {
			t.Fatalf("started %s, want the known-good version once after three failures", got)
		}
		for _, want := range []string{"HALT on machine " + host, "the machine, not the binary", "Version broken failed (last exit code 1)",
			"known-good version good failed too (exit code 2"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("the halt does not say %q:\n%s", want, stderr)
			}
		}
		// The rollback, then the halt, both left for the host to journal.
		ds, _ := upgrade.Decisions(b.state)
		if len(ds) != 2 || ds[0].Verb != upgrade.VerbRolledBack || ds[1].Verb != upgrade.VerbHalted ||
			ds[1].From != "good" || ds[1].To != "broken" || ds[1].ExitCode != 2 {
			t.Errorf("decisions %+v, want the rollback from broken, then good's halt", ds)
		}
		// Restarted by hand (or a reboot), it tries the known-good version
		// once more and halts again.
		os.Remove(b.log)
		code, stderr = b.run(nil)
		wantExit(t, code, stderr, upgrade.HaltStatus)
		if got := b.started(); got != "good" {
			t.Fatalf("after a halt started %s, want good once", got)
		}
	})
}

// TestLauncherHaltsOnADamagedJournal: a host that exits because its
// journal is damaged halts the launcher at its first exit: the version is
// not at fault, so it is neither restarted, marked bad nor rolled back.
func TestLauncherHaltsOnADamagedJournal(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("good", 1, fail2)
		b.version("new", 2, "exit "+strconv.Itoa(upgrade.DamagedStatus))
		b.knownGood("good")
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, upgrade.HaltStatus)
		if got := b.started(); got != "new" {
			t.Fatalf("started %s, want new once", got)
		}
		if !strings.Contains(stderr, "found the journal damaged") || !strings.Contains(stderr, "none is rolled back") {
			t.Errorf("the halt does not say why:\n%s", stderr)
		}
		if bad := b.file(upgrade.BadFile); bad != "" {
			t.Errorf("marked bad: %q", bad)
		}
		ds, _ := upgrade.Decisions(b.state)
		if len(ds) != 1 || ds[0].Verb != upgrade.VerbHalted || ds[0].ExitCode != upgrade.DamagedStatus {
			t.Errorf("decisions %+v, want one halt with exit code %d", ds, upgrade.DamagedStatus)
		}
	})
}

// TestLauncherHaltsWithNothingToRollBackTo: the known-good version, also
// the newest, failing at the limit is a crash with nowhere to go; so is a
// version with no known-good one at all.
func TestLauncherHaltsWithNothingToRollBackTo(t *testing.T) {
	host, _ := os.Hostname()
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("only", 1, `exit 3`)
		b.knownGood("only")
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, upgrade.HaltStatus)
		if got := b.started(); got != "only,only,only" {
			t.Fatalf("started %s", got)
		}
		if !strings.Contains(stderr, "HALT on machine "+host) || !strings.Contains(stderr, "nothing to roll back to") || !strings.Contains(stderr, "exit code 3") {
			t.Errorf("the halt says:\n%s", stderr)
		}
		// Nothing was rolled back; the halt itself is recorded, for the
		// host's next start to journal.
		ds, _ := upgrade.Decisions(b.state)
		if len(ds) != 1 || ds[0].Verb != upgrade.VerbHalted || ds[0].From != "only" || ds[0].To != "only" || ds[0].ExitCode != 3 ||
			!strings.Contains(ds[0].Reason, "nothing to roll back to") {
			t.Errorf("decisions %+v, want one halt of only with exit code 3", ds)
		}

		// No known-good record at all.
		os.Remove(filepath.Join(b.state, upgrade.KnownGoodFile))
		os.Remove(filepath.Join(b.state, upgrade.LauncherDir, upgrade.FailuresFile))
		os.Remove(b.log)
		code, stderr = b.run([]string{"MESH_HOST_FAILURE_LIMIT=2"})
		wantExit(t, code, stderr, upgrade.HaltStatus)
		if got := b.started(); got != "only,only" {
			t.Fatalf("with a limit of 2 started %s", got)
		}
		if !strings.Contains(stderr, "no known-good version") {
			t.Errorf("the halt says:\n%s", stderr)
		}
	})
}

// TestLauncherCountersSurviveARestart: the launcher killed (SIGKILL) after
// one counted failure carries on counting from it when run again.
func TestLauncherCountersSurviveARestart(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("good", 1, stop)
		// The second start of broken kills the launcher before it can
		// count that start.
		b.version("broken", 2, `[ "$(grep -c '^broken ' "$`+logEnv+`")" -eq 2 ] && kill -KILL "$PPID"; exit 1`)
		b.knownGood("good")
		code, _ := b.run(nil)
		if code != -1 {
			t.Fatalf("the launcher exited %d, want killed", code)
		}
		if f := b.file(upgrade.FailuresFile); f != "broken 1" {
			t.Fatalf("failures %q after the kill, want \"broken 1\"", f)
		}
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, 0)
		// 1 counted, 1 killed, then 2 more reach the limit of 3.
		if got := b.started(); got != "broken,broken,broken,broken,good" {
			t.Fatalf("started %s, want four starts of broken (one uncounted) then good", got)
		}
	})
}

// TestLauncherWithoutVersions: nothing to start is said, and is not a halt.
func TestLauncherWithoutVersions(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		// Half-delivered only.
		os.Remove(filepath.Join(b.version("half", 1, stop), upgrade.ArrivedFile))
		code, stderr := b.run(nil)
		if code == 0 || code == upgrade.HaltStatus {
			t.Fatalf("exited %d, want a failure that is not a halt", code)
		}
		if !strings.Contains(stderr, "no mesh-host version in "+b.versions) {
			t.Errorf("it said:\n%s", stderr)
		}
	})
}

// TestLauncherForwardsSIGTERM: stopping the service (SIGTERM to the
// launcher) stops the host, and the launcher exits 0 without starting
// anything else.
func TestLauncherForwardsSIGTERM(t *testing.T) {
	eachShell(t, func(t *testing.T, b *launcherBed) {
		// It says it is ready once its trap is set: a TERM before that
		// would end it unheard (seen on a loaded machine).
		b.version("a", 1, `trap 'echo "a got TERM" >>"$`+logEnv+`"; exit 0' TERM
: >"$`+logEnv+`.trapped"
while :; do sleep 1 & wait $!; done`)
		cmd, stderr := b.start(nil)
		deadline := time.Now().Add(20 * time.Second)
		for _, err := os.Stat(b.log + ".trapped"); b.started() != "a" || err != nil; _, err = os.Stat(b.log + ".trapped") {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatalf("a never started:\n%s", stderr)
			}
			time.Sleep(10 * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGTERM)
		code, out := b.wait(cmd, stderr)
		wantExit(t, code, out, 0)
		if s := b.starts(); len(s) != 2 || s[1] != "a got TERM" {
			t.Fatalf("log %q, want a's start then its TERM", s)
		}
	})
}

// TestLauncherIsNotABusyLoop: a version exiting 0 with nothing newer, and
// a failing one, are restarted after MESH_HOST_RESTART_DELAY.
func TestLauncherIsNotABusyLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the restart delay; skipped with -short")
	}
	eachShell(t, func(t *testing.T, b *launcherBed) {
		b.version("a", 1, `[ "$(grep -c '^a ' "$`+logEnv+`")" -ge 3 ] && { kill -TERM "$PPID"; exit 0; }; exit 0`)
		start := time.Now()
		code, stderr := b.run([]string{"MESH_HOST_RESTART_DELAY=1"})
		wantExit(t, code, stderr, 0)
		if got, took := b.started(), time.Since(start); got != "a,a,a" || took < 2*time.Second {
			t.Fatalf("started %s in %s, want a three times over at least 2 s", got, took)
		}
	})
}

// TestLauncherAgreesWithPick: for each arrangement of versions, known-good
// record and bad mark, the launcher starts what upgrade.Pick names.
func TestLauncherAgreesWithPick(t *testing.T) {
	type v struct {
		name    string
		counter uint64
	}
	for i, tc := range []struct {
		versions []v
		kg, bad  string
	}{
		{versions: []v{{"b", 1}, {"a", 2}}},
		{versions: []v{{"a", 1}, {"b", 2}}},
		{versions: []v{{"x", 5}, {"y", 3}, {"z", 4}}, kg: "y"},
		{versions: []v{{"x", 5}, {"y", 3}, {"z", 4}}, kg: "y", bad: "x"},
		{versions: []v{{"x", 5}, {"y", 3}, {"z", 4}}, kg: "y", bad: "z"},
		{versions: []v{{"x", 5}, {"y", 3}}, kg: "gone", bad: "x"},
		{versions: []v{{"k", 7}, {"j", 7}}},
		{versions: []v{{"n", 10}, {"m", 9}}}, // 10 > 9 as numbers, not as strings
	} {
		b := newLauncherBed(t, []string{"sh"})
		for _, x := range tc.versions {
			b.version(x.name, x.counter, stop)
		}
		if tc.kg != "" {
			writeFile(t, filepath.Join(b.state, upgrade.KnownGoodFile), tc.kg+"\n")
		}
		if tc.bad != "" {
			writeFile(t, filepath.Join(b.state, upgrade.LauncherDir, upgrade.BadFile), tc.bad+" 1\n")
		}
		vs, _ := upgrade.List(b.versions)
		want, _ := upgrade.Pick(vs, tc.kg, tc.bad)
		code, stderr := b.run(nil)
		wantExit(t, code, stderr, 0)
		if got := b.started(); got != want.Name {
			t.Errorf("case %d: the launcher started %s, Pick says %s", i, got, want.Name)
		}
	}
}

// TestLauncherScript: the embedded script is launcher.sh, parses, and
// states the constants Go states.
func TestLauncherScript(t *testing.T) {
	b, err := os.ReadFile("launcher.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, upgrade.Launcher) {
		t.Fatal("upgrade.Launcher is not launcher.sh")
	}
	for _, want := range []string{
		"halt_status=" + strconv.Itoa(upgrade.HaltStatus),
		"damaged_status=" + strconv.Itoa(upgrade.DamagedStatus),
		"${MESH_HOST_VERSIONS:-" + upgrade.DefaultVersionsDir + "}",
		"${MESH_HOST_STATE_DIR:-" + upgrade.DefaultStateDir + "}",
		"${MESH_HOST_FAILURE_LIMIT:-" + strconv.Itoa(upgrade.DefaultFailureLimit) + "}",
		"/" + upgrade.Executable, upgrade.ArrivedFile, "/" + upgrade.KnownGoodFile, "/" + upgrade.LauncherDir,
		"/" + upgrade.FailuresFile, "/" + upgrade.BadFile, "/" + upgrade.DecisionFile, upgrade.VerbRolledBack + " ",
	} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("launcher.sh does not say %q", want)
		}
	}
	for _, sh := range shells(t) {
		argv := append(append([]string{}, sh[1:]...), "-n", "launcher.sh")
		if out, err := exec.Command(sh[0], argv...).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", strings.Join(sh, " "), err, out)
		}
	}
}

// TestLauncherShellcheck: shellcheck, as a POSIX sh script, when installed.
func TestLauncherShellcheck(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Skip("shellcheck is not installed (apt-get install shellcheck); the launcher is not linted")
	}
	if out, err := exec.Command("shellcheck", "--shell=sh", "--severity=style", "launcher.sh").CombinedOutput(); err != nil {
		t.Fatalf("shellcheck: %v\n%s", err, out)
	}
}
