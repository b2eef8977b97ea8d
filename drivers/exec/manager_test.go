package exec_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/exec"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// fakeSystemdRun stands in for systemd-run --scope where no manager runs:
// it logs its arguments to LOG, answers --version from DIR/version, fails
// as systemd-run does when it gets no scope while DIR/fail exists, and
// otherwise says it runs as the unit, as systemd-run does, and becomes
// the command. It makes no scope: the tests of the scope itself are the
// TestLive ones.
const fakeSystemdRun = `#!/bin/sh
echo "systemd-run $*" >> 'LOG'
case "$1" in --version) cat 'DIR/version'; exit 0;; esac
if [ -e 'DIR/fail' ]; then echo "Failed to start transient scope unit: Access denied" >&2; exit 1; fi
for a; do case "$a" in --unit=*) unit=${a#--unit=};; esac; done
while [ "$1" != "--" ]; do shift; done; shift
echo "Running scope as unit: $unit" >&2
exec "$@"
`

// fakeSystemctl logs its arguments to LOG.
const fakeSystemctl = `#!/bin/sh
echo "systemctl $*" >> 'LOG'
`

// managed is a driver on a temporary root that a (fake) service manager
// runs, the directory of the fakes' state, and a function returning the
// command lines the fakes ran since it was last called, the root written
// R and each unit's random part RANDOM.
func managed(t *testing.T, version string) (*exec.Driver, *rootfs.Root, string, func() []string) {
	t.Helper()
	bin, dir := t.TempDir(), t.TempDir()
	log := filepath.Join(dir, "log")
	for name, script := range map[string]string{"systemd-run": fakeSystemdRun, "systemctl": fakeSystemctl} {
		script = strings.NewReplacer("LOG", log, "DIR", dir).Replace(script)
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "version"), []byte("systemd "+version+" ("+version+".1-1)\n+PAM +AUDIT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+":"+os.Getenv("PATH"))
	d, root := newDriver(t, exec.Options{ManagerRunning: func() bool { return true }})
	random := regexp.MustCompile(`-[0-9a-f]{12}\.scope`)
	ran := func() []string {
		data, _ := os.ReadFile(log)
		os.Remove(log)
		s := strings.TrimSpace(strings.ReplaceAll(string(data), root.Dir(), "R"))
		if s == "" {
			return nil
		}
		return strings.Split(random.ReplaceAllString(s, "-RANDOM.scope"), "\n")
	}
	return d, root, dir, ran
}

func wantRan(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s ran:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestManagerScope: where a manager runs, each run (a guard's, the
// command's) goes through systemd-run --scope under a unit of its own,
// whatever it left is killed through the manager once it exits, and what
// systemd-run says is not the command's output.
func TestManagerScope(t *testing.T) {
	d, _, _, ran := managed(t, "252")
	s := &drivers.ExecSpec{Name: "mig rate!", Command: sh("echo hello"), Unless: sh("exit 1"), Timeout: "2m"}
	if note := apply(t, d, s, drivers.Updated); note != "ran: exit code 0; output:\nhello" {
		t.Errorf("ApplyNote = %q, want the command's output alone", note)
	}
	const unit = "mesh-exec-mig_rate_-RANDOM.scope"
	scope := "systemd-run --scope --collect --unit=" + unit + " --description=mesh-host exec mig rate! --property=RuntimeMaxSec=180000ms -- "
	wantRan(t, "Apply", ran(),
		"systemd-run --version",
		scope+"/bin/sh -c exit 1 sh",
		"systemctl kill --signal=SIGKILL -- "+unit,
		scope+"/bin/sh -c echo hello sh",
		"systemctl kill --signal=SIGKILL -- "+unit,
	)
}

// TestManagerVersions: RuntimeMaxSec only from systemd 244, which first
// takes it for a scope; --expand-environment=no from 254, which first
// expands $NAME in a scope's command line.
func TestManagerVersions(t *testing.T) {
	for _, tt := range []struct{ version, want string }{
		{"243", "--description=mesh-host exec v -- /bin/sh -c echo $HOME sh"},
		{"254", "--description=mesh-host exec v --property=RuntimeMaxSec=360000ms --expand-environment=no -- /bin/sh -c echo $HOME sh"},
	} {
		d, _, _, ran := managed(t, tt.version)
		s := &drivers.ExecSpec{Name: "v", Command: sh("echo $HOME"), RefreshOnly: true}
		if _, err := d.Refresh(t.Context(), s, time.Now()); err != nil {
			t.Fatal(err)
		}
		if got := ran(); len(got) < 2 || !strings.HasSuffix(got[1], tt.want) {
			t.Errorf("systemd %s ran %q, want it to end %q", tt.version, got, tt.want)
		}
	}
}

// TestManagerUser: as another user, systemd-run drops to it (--uid,
// --gid) and the job's own HOME, SHELL, USER and LOGNAME are set over
// those it takes from the machine's user database.
func TestManagerUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running a command as another user needs root; this test runs as uid %d", os.Geteuid())
	}
	d, _, _, ran := managed(t, "252")
	s := &drivers.ExecSpec{Name: "app", Command: []string{"/bin/true"}, Unless: []string{"/bin/false"}, User: "app", Group: "staff"}
	apply(t, d, s, drivers.Updated)
	want := "--property=RuntimeMaxSec=360000ms --uid=1234 --setenv=HOME=R/srv/app --setenv=SHELL=/bin/false --setenv=USER=app --setenv=LOGNAME=app --gid=50 -- /bin/true"
	if got := ran(); len(got) < 4 || !strings.HasSuffix(got[3], want) {
		t.Errorf("as user app, group staff, ran %q, want the command's run to end %q", got, want)
	}
}

// TestManagerNoScope: a systemd-run that could not make the scope exits
// 1 as a guard might; it is an error, never a guard's answer.
func TestManagerNoScope(t *testing.T) {
	d, root, dir, _ := managed(t, "252")
	if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &drivers.ExecSpec{Name: "guarded", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), OnlyIf: sh("exit 0")}
	_, err := d.Apply(t.Context(), s)
	if !errors.Is(err, exec.ErrScope) || !strings.Contains(err.Error(), "Failed to start transient scope unit: Access denied") {
		t.Errorf("Apply when systemd-run gets no scope: got %v, want exec.ErrScope with what systemd-run said", err)
	}
	if n := runs(t, root, "/srv/log"); n != 0 {
		t.Errorf("the command ran %d times", n)
	}
}

// TestManagerTimeout: at its timeout a run's scope is killed through the
// manager, and its process group too.
func TestManagerTimeout(t *testing.T) {
	d, _, _, ran := managed(t, "252")
	s := &drivers.ExecSpec{Name: "hang", Command: sh(`echo "group $$"; sleep 1000`), RefreshOnly: true, Timeout: "300ms"}
	_, err := d.Refresh(t.Context(), s, time.Now())
	if !errors.Is(err, exec.ErrTimeout) || !regexp.MustCompile(`killed with its scope mesh-exec-hang-[0-9a-f]{12}\.scope: command timed out after 300ms`).MatchString(err.Error()) {
		t.Fatalf("Refresh past the timeout: got %v, want exec.ErrTimeout naming the scope killed", err)
	}
	wantGroupGone(t, pgidIn(t, err.Error()))
	got := ran()
	if n := strings.Count(strings.Join(got, "\n"), "systemctl kill --signal=SIGKILL -- mesh-exec-hang-RANDOM.scope"); n < 1 {
		t.Errorf("ran %q: the scope was not killed", got)
	}
}
