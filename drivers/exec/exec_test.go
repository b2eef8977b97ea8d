package exec_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/exec"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// sh is the argv that runs script with /bin/sh, args as $1...
func sh(script string, args ...string) []string {
	return append([]string{"/bin/sh", "-c", script, "sh"}, args...)
}

// newDriver is a driver over a fresh root holding etc/passwd, etc/group,
// /out and /srv, with no service manager.
func newDriver(t *testing.T, opts exec.Options) (*exec.Driver, *rootfs.Root) {
	t.Helper()
	root := driverstest.NewRoot(t, "out", "srv")
	if opts.ManagerRunning == nil {
		opts.ManagerRunning = func() bool { return false }
	}
	return exec.New(root, opts), root
}

func observe(t *testing.T, d *exec.Driver, s *drivers.ExecSpec) drivers.Observation {
	t.Helper()
	obs, err := d.Observe(t.Context(), s)
	if err != nil {
		t.Fatalf("Observe(%s): %v", s.Name, err)
	}
	return obs
}

func apply(t *testing.T, d *exec.Driver, s *drivers.ExecSpec, want drivers.Action) string {
	t.Helper()
	got, err := d.Apply(t.Context(), s)
	if err != nil {
		t.Fatalf("Apply(%s): %v", s.Name, err)
	}
	if got != want {
		t.Errorf("Apply(%s): got %q, want %q", s.Name, got, want)
	}
	return d.ApplyNote(s)
}

// runs is how many lines the file p beneath root holds: the commands of
// these tests append one line to a log each time they run.
func runs(t *testing.T, root *rootfs.Root, p string) int {
	t.Helper()
	b, err := os.ReadFile(root.Host(p))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// output is what a note says the command printed.
func output(note string) string {
	_, out, _ := strings.Cut(note, "; output:\n")
	return out
}

// undone is the exec driver with a Remove that also removes the files
// the conformance fixture's commands made. The suite proves that a
// resource is absent once removed; an exec's Remove undoes nothing (what
// a command did is not the host's to guess), so an exec is absent again
// only once something else, here the fixture, removes what it made.
// TestRemoveUndoesNothing tests the driver's own Remove.
type undone struct {
	*exec.Driver
	root *rootfs.Root
}

func (u undone) Remove(ctx context.Context, spec drivers.Spec) error {
	if err := u.Driver.Remove(ctx, spec); err != nil {
		return err
	}
	for _, p := range []string{"/out/" + spec.Key(), "/out/" + spec.Key() + ".changed"} {
		if err := os.Remove(u.root.Host(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// TestConformance: an exec with creates is absent until it ran, and in
// sync once it did; changed to an unless guard, it would run again
// (Differs "run"), runs, and is then in sync. The snapshot is the root's
// tree: what the commands make in it, and that Observe's guards make
// nothing.
func TestConformance(t *testing.T) {
	driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
		d, root := newDriver(t, exec.Options{})
		spec := func(name string) drivers.Spec {
			return &drivers.ExecSpec{Name: name, Command: sh(`echo ran >> "$MESH_ROOT/out/$1"`, name), Creates: "/out/" + name}
		}
		return driverstest.Fixture{
			Driver: undone{d, root},
			Specs:  []drivers.Spec{spec("first"), spec("second")},
			Changed: func(spec drivers.Spec) drivers.Spec {
				s := *spec.(*drivers.ExecSpec)
				s.Creates = ""
				s.Command = sh(`echo ran >> "$MESH_ROOT/out/$1.changed"`, s.Name)
				s.Unless = sh(`test -e "$MESH_ROOT/out/$1.changed"`, s.Name)
				return &s
			},
			Snapshot: func(t *testing.T) string { return driverstest.Tree(t, root.Dir()) },
		}
	})
}

// TestCreatesRunsOnce: a migration guarded by creates runs once over two
// Applies, and the notes say why it would run and why not.
func TestCreatesRunsOnce(t *testing.T) {
	d, root := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{
		Name:    "migrate",
		Command: sh(`echo migrated >> "$MESH_ROOT/srv/log"; touch "$MESH_ROOT/srv/migrated"`),
		Creates: "/srv/migrated",
	}
	obs := observe(t, d, s)
	if obs.Exists || obs.InSync || !slices.Equal(obs.Differs, []string{"absent"}) || obs.Note != "would run: /srv/migrated does not exist" {
		t.Errorf("Observe before the migration = %+v, want absent with the note %q", obs, "would run: /srv/migrated does not exist")
	}
	if note := apply(t, d, s, drivers.Created); note != "ran: exit code 0" {
		t.Errorf("ApplyNote after the run = %q, want %q", note, "ran: exit code 0")
	}
	obs = observe(t, d, s)
	if !obs.Exists || !obs.InSync || obs.Note != "/srv/migrated exists: nothing to do" || obs.Seen != "/srv/migrated exists" {
		t.Errorf("Observe after the migration = %+v, want in sync, noting that /srv/migrated exists", obs)
	}
	if note := apply(t, d, s, drivers.Unchanged); note != "/srv/migrated exists: nothing to do" {
		t.Errorf("ApplyNote of the second Apply = %q", note)
	}
	if n := runs(t, root, "/srv/log"); n != 1 {
		t.Errorf("the migration ran %d times over two Applies, want 1", n)
	}
}

// TestCreatesNoFollow: creates is looked at without following a symlink:
// a dangling symlink there is something, and a symlink on the way is
// refused.
func TestCreatesNoFollow(t *testing.T) {
	d, root := newDriver(t, exec.Options{})
	if err := os.Symlink("/nonexistent", root.Host("/srv/made")); err != nil {
		t.Fatal(err)
	}
	s := &drivers.ExecSpec{Name: "dangling", Command: []string{"true"}, Creates: "/srv/made"}
	if obs := observe(t, d, s); !obs.InSync {
		t.Errorf("Observe with a dangling symlink at creates = %+v, want in sync: something is there", obs)
	}
	if err := os.Symlink("srv", root.Host("/link")); err != nil {
		t.Fatal(err)
	}
	s = &drivers.ExecSpec{Name: "through", Command: []string{"true"}, Creates: "/link/made"}
	if _, err := d.Observe(t.Context(), s); !errors.Is(err, drivers.ErrUnsafePath) {
		t.Errorf("Observe with a symlink on creates' way: got %v, want drivers.ErrUnsafePath", err)
	}
}

// TestUnlessOnlyIf: unless exit 0 and onlyif non-zero each mean nothing
// to do, and with several guards an exec runs only if all say so.
func TestUnlessOnlyIf(t *testing.T) {
	tests := []struct {
		name           string
		unless, onlyif []string
		run            bool
		note           string
	}{
		{"unless-0", []string{"true"}, nil, false, "unless `true` exited 0: nothing to do"},
		{"unless-1", []string{"false"}, nil, true, "would run: unless `false` exited 1"},
		{"onlyif-0", nil, []string{"true"}, true, "would run: onlyif `true` exited 0"},
		{"onlyif-3", nil, sh("exit 3"), false, "onlyif `/bin/sh -c 'exit 3' sh` exited 3: nothing to do"},
		{"both-run", []string{"false"}, []string{"true"}, true, "would run: unless `false` exited 1; onlyif `true` exited 0"},
		{"unless-says-no", []string{"true"}, []string{"true"}, false, "unless `true` exited 0: nothing to do"},
		{"onlyif-says-no", []string{"false"}, []string{"false"}, false, "onlyif `false` exited 1: nothing to do"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newDriver(t, exec.Options{})
			s := &drivers.ExecSpec{Name: tt.name, Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), Unless: tt.unless, OnlyIf: tt.onlyif}
			obs := observe(t, d, s)
			if obs.Note != tt.note {
				t.Errorf("Observe note = %q, want %q", obs.Note, tt.note)
			}
			want, wantRuns := drivers.Unchanged, 0
			if tt.run {
				want, wantRuns = drivers.Updated, 1
				if !obs.Exists || obs.InSync || !slices.Equal(obs.Differs, []string{"run"}) {
					t.Errorf("Observe = %+v, want Exists, not in sync, Differs [run]", obs)
				}
			} else if !obs.Exists || !obs.InSync {
				t.Errorf("Observe = %+v, want in sync", obs)
			}
			apply(t, d, s, want)
			if n := runs(t, root, "/srv/log"); n != wantRuns {
				t.Errorf("the command ran %d times, want %d", n, wantRuns)
			}
		})
	}
}

// TestGuardKilledBySignal: a guard that a signal ended answered nothing,
// and nothing runs on its word.
func TestGuardKilledBySignal(t *testing.T) {
	d, root := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "killed-guard", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), OnlyIf: sh(`kill -9 $$`)}
	_, err := d.Apply(t.Context(), s)
	if !errors.Is(err, exec.ErrFailed) || !strings.Contains(err.Error(), "killed by signal 9") {
		t.Errorf("Apply with a guard killed by SIGKILL: got %v, want exec.ErrFailed saying it was killed by signal 9", err)
	}
	if n := runs(t, root, "/srv/log"); n != 0 {
		t.Errorf("the command ran %d times, want 0", n)
	}
}

// TestRefresh: a refresh-only exec never runs from Apply and runs at
// each Refresh; an ordinary one runs when refreshed too; neither runs
// when refreshed while creates exists or unless says no.
func TestRefresh(t *testing.T) {
	d, root := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "reload", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), RefreshOnly: true}
	obs := observe(t, d, s)
	if !obs.InSync || obs.Note != "runs only when refreshed" || obs.Seen != "refresh only" {
		t.Errorf("Observe of a refresh-only exec = %+v, want in sync, \"runs only when refreshed\"", obs)
	}
	apply(t, d, s, drivers.Unchanged)
	apply(t, d, s, drivers.Unchanged)
	if n := runs(t, root, "/srv/log"); n != 0 {
		t.Fatalf("a refresh-only exec ran %d times from Apply, want 0", n)
	}
	for i := 1; i <= 2; i++ {
		r, err := d.Refresh(t.Context(), s, time.Now())
		if err != nil {
			t.Fatalf("Refresh: %v", err)
		}
		if r.Did != "ran" || r.Note != "ran: exit code 0" {
			t.Errorf("Refresh = %+v, want Did \"ran\", Note \"ran: exit code 0\"", r)
		}
		if n := runs(t, root, "/srv/log"); n != i {
			t.Errorf("after %d refreshes the exec ran %d times", i, n)
		}
	}

	ordinary := &drivers.ExecSpec{Name: "ordinary", Command: sh(`echo ran >> "$MESH_ROOT/srv/ordinary"`), Unless: []string{"false"}}
	if r, err := d.Refresh(t.Context(), ordinary, time.Now()); err != nil || r.Did != "ran" || runs(t, root, "/srv/ordinary") != 1 {
		t.Errorf("Refresh of an ordinary exec = %+v, %v; ran %d times, want it run once", r, err, runs(t, root, "/srv/ordinary"))
	}

	if err := os.WriteFile(root.Host("/srv/made"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		spec *drivers.ExecSpec
		note string
	}{
		{
			&drivers.ExecSpec{Name: "made", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), Creates: "/srv/made", RefreshOnly: true},
			"not run, though refreshed: /srv/made exists (while what it creates exists, a refresh does nothing)",
		},
		{
			&drivers.ExecSpec{Name: "unless", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), Unless: []string{"true"}},
			"not run, though refreshed: unless `true` exited 0",
		},
	} {
		r, err := d.Refresh(t.Context(), tt.spec, time.Now())
		if err != nil || r.Did != "" || r.Note != tt.note {
			t.Errorf("Refresh(%s) = %+v, %v; want nothing done, noting %q", tt.spec.Name, r, err, tt.note)
		}
	}
	if n := runs(t, root, "/srv/log"); n != 2 {
		t.Errorf("refreshes the guards refused ran the command: %d runs, want 2", n)
	}
}

// TestSuccessCodes: an exit code not among the success codes is an error
// carrying the command, its status and its output.
func TestSuccessCodes(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		codes   []int
		fail    string // a part of the error; "" for success
	}{
		{"default-0", sh("echo fine"), nil, ""},
		{"default-3", sh("echo boom; exit 3"), nil, "command failed: exit code 3 (success: 0); output:\nboom"},
		{"listed-3", sh("exit 3"), []int{0, 3}, ""},
		{"not-listed-0", sh("exit 0"), []int{3}, "command failed: exit code 0 (success: 3); no output"},
		{"signal", sh("kill -9 $$"), []int{0, 137}, "command failed: killed by signal 9 (killed) (success: 0, 137)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newDriver(t, exec.Options{})
			s := &drivers.ExecSpec{Name: tt.name, Command: tt.command, Unless: []string{"false"}, SuccessCodes: tt.codes}
			a, err := d.Apply(t.Context(), s)
			if tt.fail == "" {
				if err != nil || a != drivers.Updated {
					t.Errorf("Apply = %q, %v; want updated", a, err)
				}
				return
			}
			if !errors.Is(err, exec.ErrFailed) || !strings.Contains(err.Error(), tt.fail) {
				t.Errorf("Apply: got %v, want exec.ErrFailed with %q", err, tt.fail)
			}
			if err != nil && !strings.Contains(err.Error(), "exec "+tt.name+": `/bin/sh -c") {
				t.Errorf("the error %q does not name the exec and its command", err)
			}
		})
	}
}

// TestEnvironment: a command sees the minimal environment and the
// spec's env, nothing of the host's.
func TestEnvironment(t *testing.T) {
	t.Setenv("MESH_TEST_LEAK", "leaked")
	d, root := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "env", Command: []string{"env"}, Unless: []string{"false"}, Env: []string{"FOO=bar baz", "LANG=C"}}
	got := strings.Split(output(apply(t, d, s, drivers.Updated)), "\n")
	slices.Sort(got)
	uid := os.Geteuid()
	user, home := "root", "/root"
	if uid != 0 {
		t.Logf("not root: commands run as uid %d, with root's passwd entry", uid)
	}
	want := []string{
		"FOO=bar baz",
		"HOME=" + root.Host(home),
		"LANG=C",
		"LOGNAME=" + user,
		"MESH_ROOT=" + root.Dir(),
		"PATH=" + exec.DefaultPath,
		"SHELL=/bin/sh",
		"USER=" + user,
	}
	if !slices.Equal(got, want) {
		t.Errorf("the command's environment:\n got %q\nwant %q", got, want)
	}
}

// TestCwd: a command runs in the root unless cwd says otherwise, and a
// cwd with a symlink on its way is refused before anything runs.
func TestCwd(t *testing.T) {
	d, root := newDriver(t, exec.Options{})
	if err := os.Mkdir(root.Host("/srv/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("srv", root.Host("/link")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ cwd, want string }{{"", root.Dir()}, {"/", root.Dir()}, {"/srv/app", root.Host("/srv/app")}} {
		s := &drivers.ExecSpec{Name: "pwd", Command: []string{"pwd", "-P"}, Unless: []string{"false"}, Cwd: tt.cwd}
		want, err := filepath.EvalSymlinks(tt.want)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(output(apply(t, d, s, drivers.Updated))); got != want {
			t.Errorf("with cwd %q the command ran in %q, want %q", tt.cwd, got, want)
		}
	}
	for _, cwd := range []string{"/link", "/link/app"} {
		s := &drivers.ExecSpec{Name: "through", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), Unless: []string{"false"}, Cwd: cwd}
		if _, err := d.Apply(t.Context(), s); !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("Apply with cwd %s through a symlink: got %v, want drivers.ErrUnsafePath", cwd, err)
		}
	}
	s := &drivers.ExecSpec{Name: "missing", Command: sh(`echo ran >> "$MESH_ROOT/srv/log"`), Unless: []string{"false"}, Cwd: "/srv/missing"}
	if _, err := d.Apply(t.Context(), s); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Apply with a missing cwd: got %v, want one wrapping os.ErrNotExist", err)
	}
	if n := runs(t, root, "/srv/log"); n != 0 {
		t.Errorf("commands with a refused cwd ran %d times", n)
	}
}

// TestUser: a command runs as the user and group of the root's own
// passwd and group, with that user's groups from the root's etc/group
// and none of the host's.
func TestUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("running a command as another user needs root; this test runs as uid %d", os.Geteuid())
	}
	d, root := newDriver(t, exec.Options{})
	passwd := driverstest.Passwd + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	group := driverstest.Group + "nogroup:x:65534:\naudio:x:29:app,nobody\nvideo:x:44:app\n"
	for name, content := range map[string]string{"/etc/passwd": passwd, "/etc/group": group} {
		if err := os.WriteFile(root.Host(name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Only the root itself need let nobody in: the command starts in the
	// directory the host opened, not by its path, whose parents (the
	// test's temporary directories) are root's alone.
	if err := os.Chmod(root.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `echo "$(id -u) $(id -g) $(id -G | tr ' ' '\n' | sort -nu | tr '\n' ' ')$HOME $USER"`
	for _, tt := range []struct{ user, group, want string }{
		{"nobody", "", "65534 65534 29 65534 " + root.Host("/nonexistent") + " nobody"},
		{"nobody", "staff", "65534 50 29 50 " + root.Host("/nonexistent") + " nobody"},
		{"app", "", "1234 1234 29 44 1234 " + root.Host("/srv/app") + " app"},
		{"", "", "0 0 0 " + root.Host("/root") + " root"},
	} {
		s := &drivers.ExecSpec{Name: "id", Command: sh(script), Unless: []string{"false"}, User: tt.user, Group: tt.group}
		if got := strings.TrimSpace(output(apply(t, d, s, drivers.Updated))); got != tt.want {
			t.Errorf("as user %q group %q the command said %q, want %q", tt.user, tt.group, got, tt.want)
		}
	}
	if err := os.Mkdir(root.Host("/srv/private"), 0o700); err != nil {
		t.Fatal(err)
	}
	s := &drivers.ExecSpec{Name: "private", Command: []string{"true"}, Unless: []string{"false"}, User: "nobody", Cwd: "/srv/private"}
	if _, err := d.Apply(t.Context(), s); !errors.Is(err, os.ErrPermission) || !strings.Contains(err.Error(), "cannot enter cwd /srv/private as user nobody") {
		t.Errorf("Apply as nobody in a directory only root may enter: got %v, want a permission error naming the cwd and the user", err)
	}
	s = &drivers.ExecSpec{Name: "who", Command: []string{"true"}, Unless: []string{"false"}, User: "nosuchuser"}
	if _, err := d.Apply(t.Context(), s); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "nosuchuser") {
		t.Errorf("Apply as a user the root does not know: got %v, want drivers.ErrInvalidSpec naming it", err)
	}
}

// live are the processes of process group pgid that have not exited
// (zombies left for a PID 1 that does not reap are not running).
func live(t *testing.T, pgid int) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[:strings.LastIndexByte(s, ')')+1])
		}
	}
	return out
}

// wantGroupGone fails the test unless process group pgid has no live
// process within a second: a SIGKILL takes effect when its target is
// next scheduled.
func wantGroupGone(t *testing.T, pgid int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for {
		left := live(t, pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("process group %d still runs: %q", pgid, left)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var groupLine = regexp.MustCompile(`group (\d+)`)

// pgidIn is the process group a command printed as "group N".
func pgidIn(t *testing.T, s string) int {
	t.Helper()
	m := groupLine.FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q does not say the command's group", s)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestTimeoutKillsGroup: at its timeout a run is killed with everything
// in its process group, promptly, and the error says so.
func TestTimeoutKillsGroup(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "hang", Command: sh(`sleep 1000 & echo "group $$"; wait`), Unless: []string{"false"}, Timeout: "500ms"}
	start := time.Now()
	_, err := d.Apply(t.Context(), s)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Apply of a command past its 500ms timeout took %v", took)
	}
	if !errors.Is(err, exec.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 500ms") ||
		!strings.Contains(err.Error(), "killed with its process group") {
		t.Fatalf("Apply past the timeout: got %v, want exec.ErrTimeout saying it timed out after 500ms and was killed", err)
	}
	wantGroupGone(t, pgidIn(t, err.Error()))
}

// TestExitKillsWhatIsLeft: once a command exits, what it left running in
// its group is killed, and Apply does not wait for it.
func TestExitKillsWhatIsLeft(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "leaves", Command: sh(`sleep 1000 & echo "group $$"`), Unless: []string{"false"}}
	start := time.Now()
	note := apply(t, d, s, drivers.Updated)
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Apply of a command that left a sleep holding its output took %v", took)
	}
	wantGroupGone(t, pgidIn(t, note))
}

// TestEscapedHoldsOutput: without a service manager, a process that left
// the group (setsid) escapes the kill, as the package says; the run still
// ends, its output cut once the grace has passed.
func TestEscapedHoldsOutput(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	// The command waits until the escapee has left its session, then
	// exits: the escapee keeps its standard error, the output's pipe.
	script := `mkfifo "$MESH_ROOT/srv/left"; setsid /bin/sh -c 'echo "escaped $$" > "$MESH_ROOT/srv/left"; exec sleep 1000' & read line < "$MESH_ROOT/srv/left"; echo "$line"`
	s := &drivers.ExecSpec{Name: "escapes", Command: sh(script), Unless: []string{"false"}}
	note := apply(t, d, s, drivers.Updated)
	m := regexp.MustCompile(`escaped (\d+)`).FindStringSubmatch(note)
	if m == nil {
		t.Fatalf("note %q does not name the escaped process", note)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if !strings.Contains(note, "[output cut: a process that left the command's group held it open]") {
		t.Errorf("note %q does not say the output was cut", note)
	}
}

// TestCancel: a run whose context ends is killed and Apply returns
// promptly with the context's error.
func TestCancel(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "cancel", Command: sh(`echo "group $$"; sleep 1000`), Unless: []string{"false"}}
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := d.Apply(ctx, s)
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Apply cancelled after 200ms returned after %v", took)
	}
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "cancelled, killed with its process group") {
		t.Fatalf("Apply cancelled: got %v, want context.Canceled saying it was cancelled and killed", err)
	}
	wantGroupGone(t, pgidIn(t, err.Error()))
}

// TestOutputBounded: a command that prints 200 KiB leaves a note and an
// error that carry the last of it, bounded.
func TestOutputBounded(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	print := `printf HEAD; i=0; while [ $i -lt 3200 ]; do printf '%063d\n' $i; i=$((i+1)); done; printf TAIL`
	s := &drivers.ExecSpec{Name: "loud", Command: sh(print), Unless: []string{"false"}}
	note := apply(t, d, s, drivers.Updated)
	if len(note) > 2200 || !strings.HasSuffix(note, "TAIL") || !strings.Contains(note, "; output:\n…") {
		t.Errorf("the note of a run that printed 200 KiB is %d bytes, ending %q: want at most about 2 KiB, its tail", len(note), note[max(0, len(note)-80):])
	}
	s = &drivers.ExecSpec{Name: "loud-fail", Command: sh(print + "; exit 1"), Unless: []string{"false"}}
	_, err := d.Apply(t.Context(), s)
	if err == nil || len(err.Error()) > 4400 || !strings.HasSuffix(err.Error(), "TAIL") {
		t.Errorf("the error of a failed run that printed 200 KiB: %d bytes; want at most about 4 KiB ending with its tail", len(fmt.Sprint(err)))
	}
}

// TestOutputTerminalSafe: control characters a command prints are shown
// escaped (an escape sequence, presentation, dropped), never passed on.
func TestOutputTerminalSafe(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "ansi", Command: sh(`printf '\033[31mred\r\007 \302\233 \342\200\256x\tend\n'`), Unless: []string{"false"}}
	got := output(apply(t, d, s, drivers.Updated))
	if want := `red\x0d\x07 \u009b \u202ex` + "\tend"; got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestRedaction: what the host knows to be secret and what looks like a
// credential never shows, in a note or in an error, in the output or in
// the command.
func TestRedaction(t *testing.T) {
	d, _ := newDriver(t, exec.Options{Redact: func(s string) string { return strings.ReplaceAll(s, "hunter2", "[secret]") }})
	print := `echo "db pass hunter2"; echo "password=abc123 token: xyz789"; echo "https://u:pw0rd@example.com/x"; echo "Authorization: Bearer abc.def"`
	s := &drivers.ExecSpec{Name: "secrets", Command: sh(print), Unless: []string{"false"}}
	note := apply(t, d, s, drivers.Updated)
	want := "db pass [secret]\npassword=[redacted] token: [redacted]\nhttps://u:[redacted]@example.com/x\nAuthorization: [redacted]"
	if got := output(note); got != want {
		t.Errorf("output:\n got %q\nwant %q", got, want)
	}
	s = &drivers.ExecSpec{Name: "secret-argv", Command: sh(`echo "$1"; exit 1`, "hunter2"), Unless: []string{"false"}}
	_, err := d.Apply(t.Context(), s)
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "[secret]") {
		t.Errorf("the error of a failed command with a secret argument: %v; want it redacted", err)
	}
}

// TestInvalid: a spec the driver cannot run safely is refused by every
// call, before anything runs.
func TestInvalid(t *testing.T) {
	touch := sh(`echo ran >> "$MESH_ROOT/srv/log"`)
	tests := []struct {
		name string
		spec drivers.ExecSpec
		says string
	}{
		{"no-guard", drivers.ExecSpec{Name: "x", Command: touch}, "an exec must be idempotent: give creates, unless, onlyif or refresh_only"},
		{"no-name", drivers.ExecSpec{Command: touch, Unless: []string{"false"}}, "exec has no name"},
		{"slash", drivers.ExecSpec{Name: "a/b", Command: touch, Unless: []string{"false"}}, "has a /"},
		{"no-command", drivers.ExecSpec{Name: "x", Unless: []string{"false"}}, "command: no program"},
		{"empty-unless", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{}}, "unless: no program"},
		{"relative", drivers.ExecSpec{Name: "x", Command: []string{"./run"}, Unless: []string{"false"}}, "neither an absolute, clean path nor a name"},
		{"unclean", drivers.ExecSpec{Name: "x", Command: []string{"/bin/../bin/sh"}, Unless: []string{"false"}}, "neither an absolute, clean path nor a name"},
		{"nul", drivers.ExecSpec{Name: "x", Command: []string{"echo", "a\x00b"}, Unless: []string{"false"}}, "contains NUL"},
		{"timeout-zero", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Timeout: "0s"}, "timeout \"0s\""},
		{"timeout-long", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Timeout: "25h"}, "timeout \"25h\""},
		{"timeout-words", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Timeout: "five minutes"}, "is not a duration"},
		{"env-form", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Env: []string{"NOVALUE"}}, "not NAME=value"},
		{"env-name", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Env: []string{"1A=b"}}, "not NAME=value"},
		{"env-twice", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Env: []string{"A=1", "A=2"}}, "A is given twice"},
		{"env-root", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Env: []string{"MESH_ROOT=/"}}, "MESH_ROOT is the host's to set"},
		{"cwd", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, Cwd: "srv"}, "cwd"},
		{"creates", drivers.ExecSpec{Name: "x", Command: touch, Creates: "/srv/../etc"}, "creates"},
		{"code", drivers.ExecSpec{Name: "x", Command: touch, Unless: []string{"false"}, SuccessCodes: []int{256}}, "success code 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, root := newDriver(t, exec.Options{})
			s := &tt.spec
			_, errObserve := d.Observe(t.Context(), s)
			_, errApply := d.Apply(t.Context(), s)
			_, errRefresh := d.Refresh(t.Context(), s, time.Now())
			for name, err := range map[string]error{"Observe": errObserve, "Apply": errApply, "Refresh": errRefresh} {
				if !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), tt.says) {
					t.Errorf("%s: got %v, want drivers.ErrInvalidSpec saying %q", name, err, tt.says)
				}
			}
			if n := runs(t, root, "/srv/log"); n != 0 {
				t.Errorf("an invalid exec ran %d times", n)
			}
		})
	}
}

// TestNotOnPath: a program that is not on PATH is named in the error.
func TestNotOnPath(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "missing", Command: []string{"mesh-no-such-program"}, Unless: []string{"false"}}
	if _, err := d.Apply(t.Context(), s); !errors.Is(err, drivers.ErrToolMissing) || !strings.Contains(err.Error(), "mesh-no-such-program is not on PATH") {
		t.Errorf("Apply of a program not on PATH: got %v, want drivers.ErrToolMissing naming it", err)
	}
	s = &drivers.ExecSpec{Name: "missing-guard", Command: []string{"true"}, Unless: []string{"/usr/bin/mesh-no-such-program"}}
	if _, err := d.Observe(t.Context(), s); !errors.Is(err, drivers.ErrToolMissing) {
		t.Errorf("Observe with a guard that does not exist: got %v, want drivers.ErrToolMissing", err)
	}
}

// TestRemoveUndoesNothing: Remove of an exec that ran changes nothing.
func TestRemoveUndoesNothing(t *testing.T) {
	d, root := newDriver(t, exec.Options{})
	s := &drivers.ExecSpec{Name: "made", Command: sh(`touch "$MESH_ROOT/srv/made"`), Creates: "/srv/made"}
	apply(t, d, s, drivers.Created)
	before := driverstest.Tree(t, root.Dir())
	keyOnly, err := drivers.SpecForRemoval(drivers.ID(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(t.Context(), keyOnly); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if after := driverstest.Tree(t, root.Dir()); after != before {
		t.Errorf("Remove changed the root:\n got %s\nwant %s", after, before)
	}
}

// TestParallel: execs applied at once each get their own note, and two
// runs of one exec never overlap.
func TestParallel(t *testing.T) {
	d, _ := newDriver(t, exec.Options{})
	var wg sync.WaitGroup
	specs := make([]*drivers.ExecSpec, 8)
	for i := range specs {
		specs[i] = &drivers.ExecSpec{Name: fmt.Sprintf("p%d", i), Command: sh(`echo "I am $1"`, strconv.Itoa(i)), Unless: []string{"false"}}
	}
	once := &drivers.ExecSpec{
		Name:    "once-at-a-time",
		Command: sh(`if [ -e "$MESH_ROOT/srv/lock" ]; then echo overlap; exit 1; fi; touch "$MESH_ROOT/srv/lock"; sleep 0.2; rm "$MESH_ROOT/srv/lock"`),
		Unless:  []string{"false"},
	}
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			_, err := d.Apply(t.Context(), once)
			errs <- err
		})
	}
	for _, s := range specs {
		wg.Go(func() {
			if _, err := d.Apply(t.Context(), s); err != nil {
				t.Errorf("Apply(%s): %v", s.Name, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("two Applies of one exec at once: %v", err)
		}
	}
	for i, s := range specs {
		if got, want := output(d.ApplyNote(s)), fmt.Sprintf("I am %d", i); got != want {
			t.Errorf("ApplyNote(%s) says %q, want %q", s.Name, got, want)
		}
	}
}
