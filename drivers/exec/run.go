package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
)

// outputGrace is how long, once a command's processes were killed, its
// output may stay open before the host stops reading it: only something
// that left the process group (without a service manager to find it)
// still holds it then.
const outputGrace = 5 * time.Second

// ran is how a run ended.
type ran struct {
	// code is the exit code, -1 when a signal ended the command.
	code   int
	status string
	// output is what it printed, rendered (see capture.render).
	output string
}

// runError is the error of a run that did not end by itself: killed at
// its timeout or when ctx ended, or never started.
func runError(j *job, what string, argv []string, how string, err error, out string) error {
	if out = strings.TrimSpace(out); out != "" {
		out = "; output:\n" + lastOf(out, errorBytes)
	}
	return fmt.Errorf("exec %s: %s: %s: %w%s", j.spec.Name, j.show(what, argv), how, err, out)
}

// run runs argv, the job's command or one of its guards (what: "command",
// "unless", "onlyif"), as the job says and returns how it ended. The
// error is
// non-nil when it did not run to an exit of its own: not found, not
// started, or killed, with everything it started, at the job's timeout
// or when ctx ended. Its exit code, success or not, is for the caller to
// judge.
func (d *Driver) run(ctx context.Context, j *job, what string, argv []string) (ran, error) {
	if err := ctx.Err(); err != nil {
		return ran{}, runError(j, what, argv, "not started", context.Cause(ctx), "")
	}
	prog, err := lookPath(argv[0], j.path)
	if err != nil {
		return ran{}, fmt.Errorf("exec %s: %s: %w", j.spec.Name, what, err)
	}
	var sc *scope
	if d.managerRunning() {
		if sc, err = d.newScope(ctx, j); err != nil {
			return ran{}, fmt.Errorf("exec %s: %w", j.spec.Name, err)
		}
	}
	ctx, cancel := drivers.WithTimeout(ctx, j.timeout, ErrTimeout)
	defer cancel()

	// The working directory is opened beneath the root without following
	// a symlink, and the command starts in the directory that was opened:
	// its path is not looked up again, so a directory swapped for a
	// symlink meanwhile is not followed. The child changes into it by
	// /proc/self/fd before its descriptors are rearranged for exec.
	dir, err := d.root.OpenDir(j.cwd)
	if err != nil {
		return ran{}, fmt.Errorf("exec %s: cwd: %w", j.spec.Name, err)
	}
	defer dir.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return ran{}, fmt.Errorf("exec %s: %w", j.spec.Name, err)
	}
	defer r.Close()
	cmd := &osexec.Cmd{
		Path: prog,
		Args: argv,
		Env:  j.env,
		Dir:  "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())),
		// One pipe for both: what the command says reads in the order
		// it said it. Stdin is nil: /dev/null.
		Stdout:      w,
		Stderr:      w,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: j.credential(sc != nil)},
	}
	if sc != nil {
		cmd.Path, cmd.Args = sc.wrap(prog, argv)
	}
	err = cmd.Start()
	w.Close()
	if errors.Is(err, syscall.EACCES) && !j.mayEnter(dir) {
		// The child says only EACCES, for its chdir as for its exec.
		return ran{}, runError(j, what, argv, fmt.Sprintf("not started: cannot enter cwd %s as user %s", j.cwd, j.as.name), err, "")
	}
	if err != nil {
		return ran{}, runError(j, what, argv, "not started", err, "")
	}

	var out capture
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(&out, r)
	}()
	exited := make(chan error, 1)
	go func() { exited <- waitExited(cmd.Process.Pid) }()

	var killed error
	select {
	case err = <-exited:
	case <-ctx.Done():
		killed = context.Cause(ctx)
		d.kill(cmd.Process.Pid, sc)
		err = <-exited
	}
	if err != nil {
		// Only a bug makes waitid fail: nothing is left to wait for.
		d.kill(cmd.Process.Pid, sc)
		r.Close()
		<-copied
		cmd.Wait()
		return ran{}, runError(j, what, argv, "wait", err, "")
	}
	// An exec runs to its end and leaves nothing behind: whatever it
	// started that is still running once it exits is killed, in its
	// group and in its scope. A daemon is a unit's to run.
	leftErr := d.kill(cmd.Process.Pid, sc)
	cut := false
	select {
	case <-copied:
	case <-time.After(outputGrace):
		r.Close()
		<-copied
		cut = true
	}
	waitErr := cmd.Wait()

	if started := sc.started(&out); !started && killed == nil {
		return ran{}, runError(j, what, argv, "systemd-run could not start it in a scope of its own", ErrScope, out.render(j.redact))
	}
	res := ran{code: cmd.ProcessState.ExitCode(), output: out.render(j.redact)}
	if cut {
		res.output += "\n[output cut: a process that left the command's group held it open]"
	}
	switch {
	case killed != nil && errors.Is(killed, ErrTimeout):
		return res, runError(j, what, argv, "killed "+sc.with(), killed, res.output)
	case killed != nil:
		return res, runError(j, what, argv, "cancelled, killed "+sc.with(), killed, res.output)
	case leftErr != nil:
		return res, runError(j, what, argv, "ran, but what it left running could not be killed", leftErr, res.output)
	}
	var exit *osexec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exit) {
		return res, runError(j, what, argv, "wait", waitErr, res.output)
	}
	res.status = statusOf(cmd.ProcessState)
	return res, nil
}

// statusOf says how a process ended, in words.
func statusOf(ps *os.ProcessState) string {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
	}
	return fmt.Sprintf("exit code %d", ps.ExitCode())
}

// waitExited waits until the process pid has exited without reaping it:
// while it is a zombie its process group cannot be another's, so killing
// the group afterwards kills what the command left and nothing else.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// kill kills everything the run started: its scope where it has one,
// then its process group (which holds systemd-run itself until the
// command replaces it). A group already gone is not an error.
func (d *Driver) kill(pgid int, sc *scope) error {
	var err error
	if sc != nil {
		err = sc.kill()
	}
	if e := syscall.Kill(-pgid, syscall.SIGKILL); e != nil && !errors.Is(e, syscall.ESRCH) {
		err = errors.Join(err, fmt.Errorf("kill process group %d: %w", pgid, e))
	}
	return err
}

// credential is who the process the host starts runs as. Under a service
// manager that process is systemd-run, which must be root to ask for a
// scope: it runs as root with the command's supplementary groups, and
// drops to the command's user and group itself (--uid, --gid) right
// before it becomes the command, keeping those groups.
func (j *job) credential(scoped bool) *syscall.Credential {
	if j.asSelf {
		return nil
	}
	if scoped {
		return &syscall.Credential{Uid: 0, Gid: 0, Groups: j.as.groups}
	}
	return &syscall.Credential{Uid: j.as.uid, Gid: j.as.gid, Groups: j.as.groups}
}

// mayEnter reports whether the job's user may enter the directory dir
// by its mode (ACLs are not read): to tell, when a command could not
// start for want of permission, that its cwd was the reason.
func (j *job) mayEnter(dir *os.File) bool {
	var st unix.Stat_t
	if j.asSelf || j.as.uid == 0 || unix.Fstat(int(dir.Fd()), &st) != nil {
		return true
	}
	switch {
	case st.Uid == j.as.uid:
		return st.Mode&0o100 != 0
	case slices.Contains(j.as.groups, st.Gid):
		return st.Mode&0o010 != 0
	}
	return st.Mode&0o001 != 0
}

func runningAsRoot() bool { return os.Geteuid() == 0 }

// lookPath finds the program name on path (a PATH value; its relative
// entries are skipped), or returns name itself when it is a path.
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if err := executable(name); err != nil {
			return "", fmt.Errorf("%w: %s: %v", drivers.ErrToolMissing, name, err)
		}
		return name, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if executable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not on PATH (%s)", drivers.ErrToolMissing, name, path)
}

func executable(p string) error {
	fi, err := os.Stat(p)
	switch {
	case err != nil:
		return err
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file")
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("not executable")
	}
	return nil
}

// show is argv as a person reads it in a message: quoted as a shell
// would need it, redacted, terminal-safe and at most 200 bytes; a guard's
// named as one ("unless `test -f /x`").
func (j *job) show(what string, argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shellQuote(a)
	}
	s := drivers.Shown(strings.Join(q, " "), j.redact)
	if n := cutFront(s, 200); n < len(s) {
		s = s[:n] + "…"
	}
	if what != "command" {
		return what + " `" + s + "`"
	}
	return "`" + s + "`"
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
