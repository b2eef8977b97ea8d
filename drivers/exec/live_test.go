package exec_test

import (
	"errors"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/exec"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// The TestLive tests run execs on the root "/" of a machine where systemd
// runs as PID 1 (testbeds/systemd boots one and runs them there): each
// run in a scope of its own, and nothing of it left once killed, a
// daemon that left its session included.

// needLive skips a live test where it cannot run.
func needLive(t *testing.T) *exec.Driver {
	t.Helper()
	if os.Getenv("MESH_LIVE_MANAGER") != "1" {
		t.Skip("a live test: it runs where systemd is PID 1 and MESH_LIVE_MANAGER=1 (testbeds/systemd)")
	}
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		t.Skip("MESH_LIVE_MANAGER=1, but no service manager runs here: /run/systemd/system does not exist")
	}
	if os.Geteuid() != 0 {
		t.Skipf("a live test runs as root, on the root /; this runs as uid %d", os.Geteuid())
	}
	root, err := rootfs.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	t.Cleanup(func() { wantNoScopes(t) })
	return exec.New(root, exec.Options{})
}

// orphanBinary is a copy of sleep under a name of its own, so that the
// processes a test starts are told from every other sleep by their
// executable.
func orphanBinary(t *testing.T) string {
	t.Helper()
	src, err := osexec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	p := filepath.Join(t.TempDir(), "mesh-exec-orphan-"+strconv.Itoa(os.Getpid()))
	out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range running(t, p) {
			syscall.Kill(pid, syscall.SIGKILL) // only what this test started
		}
	})
	return p
}

// running are the processes whose executable is exe.
func running(t *testing.T, exe string) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink("/proc/" + e.Name() + "/exe"); err == nil && target == exe {
			pids = append(pids, pid)
		}
	}
	return pids
}

// session is the session of process pid.
func session(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	s := string(b)
	if f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]); len(f) >= 4 {
		return f[3]
	}
	return ""
}

// eventually polls cond until it holds or 5 s have passed.
func eventually(t *testing.T, cond func() bool) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// wantNoneRunning fails the test if a process of exe is still running.
func wantNoneRunning(t *testing.T, exe string) {
	t.Helper()
	if !eventually(t, func() bool { return len(running(t, exe)) == 0 }) {
		t.Errorf("still running after the run was killed: %s as pids %v", exe, running(t, exe))
	}
}

// scopes are the mesh-exec units the manager knows, in any state.
func scopes(t *testing.T) string {
	t.Helper()
	out, err := osexec.Command("systemctl", "list-units", "--all", "--plain", "--no-legend", "mesh-exec-*").CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl list-units: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func wantNoScopes(t *testing.T) {
	t.Helper()
	if !eventually(t, func() bool { return scopes(t) == "" }) {
		t.Errorf("mesh-exec scopes are left:\n%s", scopes(t))
	}
}

// TestLiveTimeoutKillsDaemon: a command that daemonises a grandchild (a
// session of its own, its parent gone) and outlives its timeout is
// killed with the grandchild: the scope held it, and is gone after.
func TestLiveTimeoutKillsDaemon(t *testing.T) {
	d := needLive(t)
	orphan := orphanBinary(t)
	script := `setsid /bin/sh -c '"$0" 1000 &' "$1"; exec "$1" 1001`
	s := &drivers.ExecSpec{Name: "live-timeout", Command: sh(script, orphan), Unless: []string{"/bin/false"}, Timeout: "3s"}
	done := make(chan error, 1)
	go func() {
		_, err := d.Apply(t.Context(), s)
		done <- err
	}()
	// Before the timeout: the command and a grandchild in another
	// session both run, so the kill has something to prove.
	escaped := eventually(t, func() bool {
		pids := running(t, orphan)
		return len(pids) == 2 && session(t, pids[0]) != session(t, pids[1]) && session(t, pids[0]) != ""
	})
	if !escaped {
		t.Errorf("the grandchild was never seen running in a session of its own: %v", running(t, orphan))
	}
	err := <-done
	if !errors.Is(err, exec.ErrTimeout) || !regexp.MustCompile(`killed with its scope mesh-exec-live-timeout-[0-9a-f]{12}\.scope: command timed out after 3s`).MatchString(err.Error()) {
		t.Fatalf("Apply past the timeout: got %v, want exec.ErrTimeout naming the scope killed", err)
	}
	t.Logf("Apply: %v", err)
	wantNoneRunning(t, orphan)
	wantNoScopes(t)
}

// TestLiveExitKillsDaemon: what a command daemonised is killed once the
// command exits by itself.
func TestLiveExitKillsDaemon(t *testing.T) {
	d := needLive(t)
	orphan := orphanBinary(t)
	fifo := filepath.Join(t.TempDir(), "up")
	script := `mkfifo "$2"; setsid /bin/sh -c '"$1" 1000 & echo "daemon $!" > "$2"' sh "$1" "$2" & read line < "$2"; echo "$line"`
	s := &drivers.ExecSpec{Name: "live-exit", Command: sh(script, orphan, fifo), Unless: []string{"/bin/false"}}
	note := apply(t, d, s, drivers.Updated)
	t.Logf("ApplyNote: %q", note)
	if !regexp.MustCompile(`daemon \d+`).MatchString(note) {
		t.Errorf("note %q does not say the daemon started", note)
	}
	wantNoneRunning(t, orphan)
	wantNoScopes(t)
}

// TestLiveScope: a run is in its own scope, as the user the spec names
// with that user's groups alone (none of the host's), in the job's
// environment (the spec's HOME, not the one systemd-run takes from the
// user database), and its argv is passed as it is ($HOME stays $HOME).
func TestLiveScope(t *testing.T) {
	d := needLive(t)
	// The test process holds a group of its own meanwhile: the command
	// must not inherit it, whoever starts it.
	held, err := syscall.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgroups(append(held, 4242)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setgroups(held) })
	script := `grep -o -m1 'mesh-exec-[^/]*\.scope' /proc/self/cgroup; id -u; id -G; echo "$HOME $USER $1"`
	s := &drivers.ExecSpec{Name: "live-scope", Command: sh(script, "$HOME"), Unless: []string{"/bin/false"}, User: "nobody", Env: []string{"HOME=/home/elsewhere"}}
	got := output(apply(t, d, s, drivers.Updated))
	t.Logf("output:\n%s", got)
	want := regexp.MustCompile(`^mesh-exec-live-scope-[0-9a-f]{12}\.scope\n65534\n65534\n/home/elsewhere nobody \$HOME$`)
	if !want.MatchString(got) {
		t.Errorf("output %q, want it to match %s", got, want)
	}
}
