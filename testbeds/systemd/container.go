package systemd

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// SharePath is where every container sees its Share directory.
const SharePath = "/mesh-bed"

// sigPoweroff is SIGRTMIN+4, which asks systemd as PID 1 to power off:
// glibc's SIGRTMIN, which systemd counts from, is 34 (it keeps the
// kernel's 32 and 33 for its threads). Go has no name for it.
const sigPoweroff = syscall.Signal(34 + 4)

// How long things may take.
const (
	bootLimit     = 60 * time.Second
	poweroffLimit = 30 * time.Second
	killLimit     = 10 * time.Second
	// ExecLimit bounds MustExec and the other calls that take no context.
	ExecLimit = 2 * time.Minute
)

// baseEnv is every command's environment inside: nothing of this
// machine's (its PATH names directories the tree does not have).
var baseEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root", "LANG=C.UTF-8", "TERM=dumb", "SYSTEMD_PAGER=cat", "SYSTEMD_COLORS=0",
}

// Options say how to boot a container.
type Options struct {
	// Binds are directories or files outside the container seen inside,
	// beside Share.
	Binds []Bind
	// PrivateNetwork gives the container a network namespace of its own
	// with loopback alone: nothing outside it is reachable. Without it
	// the container shares the machine's network, so that a host inside
	// reaches a `meshctl serve` on 127.0.0.1 (and a server inside listens
	// on the machine's ports: two web servers on port 80 collide).
	PrivateNetwork bool
	// Module binds the module's source read-only at its own path, so
	// that GoTest runs a package's tests in its directory, with its
	// testdata, as go test does.
	Module bool
}

// Bind is a path outside a container seen inside it.
type Bind struct {
	Host, Container string
	// Writable binds it read-write; by default the container cannot
	// change it.
	Writable bool
}

// Container is a running machine: systemd as PID 1 in the cached tree,
// writing to an overlay that goes with it.
type Container struct {
	// Name is the machine's name and its hostname (uname -n).
	Name string
	// Share is a directory outside the container that it sees, read-only,
	// at SharePath: put files there for it (a package, test binaries) at
	// any time.
	Share string

	tb      TB
	module  string // the module's directory, bound at its own path; or ""
	console string // the console's output, outside the container
	cgroups []string
	nspawn  *exec.Cmd
	done    chan struct{} // closed when nspawn has exited
	pid1    int           // the container's init, as the outer machine numbers it

	stopOnce sync.Once
	stopErr  error
}

// Boot boots a container from the tree and waits until systemd says the
// system is running (or degraded, which a container with a failed unit
// is). It is stopped when the test ends; if the test failed, the
// container's journal and console are printed first.
func Boot(tb TB, opt Options) *Container {
	tb.Helper()
	tree := Tree(tb)
	c := &Container{Name: "mesh-bed-" + randomHex(4), Share: tb.TempDir(), tb: tb, done: make(chan struct{})}
	c.console = filepath.Join(tb.TempDir(), "console.log")
	if err := os.Chmod(c.Share, 0o755); err != nil {
		tb.Fatalf("%v", err)
	}
	args := []string{
		"--directory=" + tree, "--boot", "--machine=" + c.Name,
		// Not registered with a machined, and in the cgroup it is
		// started in rather than a scope of its own: the outer machine's PID 1
		// need not be systemd. Without --keep-unit nspawn asks the system
		// bus for a scope, and fails without one.
		"--register=no", "--keep-unit",
		// The tree is the lower layer of an overlay on a tmpfs: nothing
		// a container writes reaches it, and any number boot it at once.
		"--volatile=overlay",
		// The console's output, for a failure's report; nothing reads
		// its input.
		"--console=read-only",
		// The journal stays inside: every container has the tree's
		// machine id, and auto would share the outer machine's journal
		// directory for it between them.
		"--link-journal=no",
		"--bind-ro=" + c.Share + ":" + SharePath,
	}
	if opt.PrivateNetwork {
		args = append(args, "--private-network")
	}
	if opt.Module {
		dir, err := testbeds.ModuleRoot()
		if err != nil {
			tb.Fatalf("%v", err)
		}
		c.module = dir
		args = append(args, "--bind-ro="+dir)
	}
	for _, b := range opt.Binds {
		flag := "--bind-ro="
		if b.Writable {
			flag = "--bind="
		}
		args = append(args, flag+b.Host+":"+b.Container)
	}

	var err error
	if c.cgroups, err = newCgroups(c.Name); err != nil {
		tb.Fatalf("boot %s: %v", c.Name, err)
	}
	console, err := os.Create(c.console)
	if err != nil {
		_ = removeCgroups(c.cgroups, killLimit)
		tb.Fatalf("%v", err)
	}
	// nspawn must be in its cgroups before it starts: the shell joins
	// them, then becomes nspawn.
	shArgs := []string{"-c", `for f; do shift; [ "$f" = -- ] && break; echo $$ >"$f" || exit 125; done; exec "$@"`, "sh"}
	for _, d := range c.cgroups {
		shArgs = append(shArgs, filepath.Join(d, "cgroup.procs"))
	}
	shArgs = append(shArgs, "--", "systemd-nspawn")
	c.nspawn = exec.Command("/bin/sh", append(shArgs, args...)...)
	c.nspawn.Stdout, c.nspawn.Stderr = console, console
	// Its own process group: a ^C to go test is for go test, and the
	// container is powered off by Stop. Should the test process die
	// first (a timeout's panic, a SIGKILL), nspawn is sent SIGTERM,
	// which it passes on to the container as a poweroff: no machine
	// outlives its test. (Its cgroups do, empty.)
	c.nspawn.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := c.nspawn.Start(); err != nil {
		console.Close()
		_ = removeCgroups(c.cgroups, killLimit)
		tb.Fatalf("start systemd-nspawn: %v", err)
	}
	go func() {
		_ = c.nspawn.Wait()
		console.Close()
		close(c.done)
	}()
	tb.Cleanup(c.cleanup)

	testbeds.Eventually(tb, bootLimit, c.Name+"'s init starts", func() error {
		if c.exited() {
			return testbeds.Fatal(fmt.Errorf("systemd-nspawn exited (%s):\n%s", c.nspawn.ProcessState, c.ConsoleTail(4000)))
		}
		pid, err := containerInit(c.nspawn.Process.Pid)
		if err != nil {
			return err
		}
		c.pid1 = pid
		return nil
	})
	testbeds.Eventually(tb, bootLimit, c.Name+" boots", func() error {
		if c.exited() {
			return testbeds.Fatal(fmt.Errorf("systemd-nspawn exited (%s):\n%s", c.nspawn.ProcessState, c.ConsoleTail(4000)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := c.Exec(ctx, "systemctl", "is-system-running")
		if err != nil {
			return err
		}
		switch state := strings.TrimSpace(r.Stdout); state {
		case "running":
			return nil
		case "degraded":
			failed, _ := c.Exec(ctx, "systemctl", "--failed", "--no-legend")
			tb.Logf("%s booted degraded: %s", c.Name, failed.Stdout)
			return nil
		case "maintenance", "stopping":
			return testbeds.Fatal(fmt.Errorf("the system is %s:\n%s", state, c.ConsoleTail(4000)))
		default:
			// initializing, starting; offline while systemd is not
			// answering yet.
			return fmt.Errorf("systemctl is-system-running: %s", r)
		}
	})
	return c
}

// containerInit finds the container's PID 1 among nspawn's children (nspawn
// is their subreaper): the one that is 1 in a pid namespace of its own.
func containerInit(nspawn int) (int, error) {
	kids, err := testbeds.Children(nspawn)
	if err != nil {
		return 0, err
	}
	for _, k := range kids {
		ns, err := nsPIDs(k)
		if err == nil && len(ns) >= 2 && ns[len(ns)-1] == 1 {
			return k, nil
		}
	}
	return 0, fmt.Errorf("no child of systemd-nspawn (%d) is a PID 1 yet", nspawn)
}

// nsPIDs is the NSpid line of a process's status: its pid in each pid
// namespace it is in, outermost first.
func nsPIDs(pid int) ([]int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			var out []int
			for _, f := range strings.Fields(v) {
				n, err := strconv.Atoi(f)
				if err != nil {
					return nil, fmt.Errorf("/proc/%d/status: NSpid %q", pid, v)
				}
				out = append(out, n)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("/proc/%d/status: no NSpid", pid)
}

func (c *Container) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Cgroups are the container's control groups outside the container, one in
// each hierarchy; Stop removes them.
func (c *Container) Cgroups() []string { return slices.Clone(c.cgroups) }

// Running reports whether the container's nspawn has not exited.
func (c *Container) Running() bool { return !c.exited() }

// Cmd is a command to run inside a container.
type Cmd struct {
	Args []string
	// Env is added to the container's own environment (PATH, HOME, ...);
	// nothing of this process's reaches a command.
	Env []string
	// Dir is the working directory; "" is "/".
	Dir   string
	Stdin io.Reader
}

// Exec runs a command inside: a process that enters every namespace of
// the container's PID 1 (nsenter), root with every capability, outside
// the container's own cgroups. Result is what it printed and its exit
// code; the error is for a command that could not be run or was ended by
// ctx.
func (c *Container) Exec(ctx context.Context, args ...string) (testbeds.Result, error) {
	return c.Run(ctx, Cmd{Args: args})
}

// Run is Exec with an environment, a directory and input.
func (c *Container) Run(ctx context.Context, cmd Cmd) (testbeds.Result, error) {
	if len(cmd.Args) == 0 {
		return testbeds.Result{}, errors.New("no command")
	}
	// env -i inside: the command gets baseEnv and cmd.Env, in cmd.Dir.
	argv := []string{"--target=" + strconv.Itoa(c.pid1), "--all", "--", "/usr/bin/env", "-i"}
	if cmd.Dir != "" {
		argv = append(argv, "--chdir="+cmd.Dir)
	}
	argv = append(argv, baseEnv...)
	argv = append(argv, cmd.Env...)
	argv = append(argv, cmd.Args...)
	x := exec.CommandContext(ctx, "nsenter", argv...)
	x.Env = baseEnv
	x.Stdin = cmd.Stdin
	var out, errb bytes.Buffer
	x.Stdout, x.Stderr = &out, &errb
	// nsenter forks to enter the pid namespace: ending it alone would
	// leave the command running inside. Its group goes whole.
	x.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	x.Cancel = func() error { return syscall.Kill(-x.Process.Pid, syscall.SIGKILL) }
	x.WaitDelay = 5 * time.Second
	err := x.Run()
	r := testbeds.Result{Stdout: out.String(), Stderr: errb.String()}
	if ctx.Err() != nil {
		return r, fmt.Errorf("%s in %s: %w", strings.Join(cmd.Args, " "), c.Name, ctx.Err())
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		return r, fmt.Errorf("nsenter into %s: %w", c.Name, err)
	}
	return r, nil
}

// MustExec runs a command inside (within ExecLimit) and fails the test
// unless it exits 0; it returns what the command printed.
func (c *Container) MustExec(args ...string) string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ExecLimit)
	defer cancel()
	r, err := c.Exec(ctx, args...)
	if err != nil {
		c.tb.Fatalf("%v", err)
	}
	if r.Code != 0 {
		c.tb.Fatalf("%s in %s: %s", strings.Join(args, " "), c.Name, r)
	}
	return r.Stdout
}

// Try runs a command inside within ExecLimit, for a poll: a command that
// could not run is an exit code of -1 with the reason on stderr.
func (c *Container) Try(args ...string) testbeds.Result {
	ctx, cancel := context.WithTimeout(context.Background(), ExecLimit)
	defer cancel()
	r, err := c.Exec(ctx, args...)
	if err != nil {
		r.Code, r.Stderr = -1, r.Stderr+err.Error()
	}
	return r
}

// Journal is the container's journal for this boot, of the units named
// (all of it if none), its last lines lines.
func (c *Container) Journal(lines int, units ...string) string {
	args := []string{"journalctl", "--boot", "--no-pager", "--no-hostname", "--output=short-precise", "--lines=" + strconv.Itoa(lines)}
	for _, u := range units {
		args = append(args, "--unit="+u)
	}
	r := c.Try(args...)
	if r.Code != 0 {
		return fmt.Sprintf("<journalctl: %s>", r)
	}
	return r.Stdout
}

// ConsoleTail is the last n bytes of what the container printed on its
// console (systemd's boot and shutdown messages) and nspawn's own.
func (c *Container) ConsoleTail(n int) string {
	b, err := os.ReadFile(c.console)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(tail(b, n))
}

// HostPID is the outer machine's number of the process the container numbers pid.
func (c *Container) HostPID(pid int) (int, error) {
	want, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c.pid1))
	if err != nil {
		return 0, fmt.Errorf("the pid namespace of %s: %w", c.Name, err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		ns, err := nsPIDs(p)
		if err != nil || len(ns) < 2 || ns[len(ns)-1] != pid {
			continue
		}
		if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", p)); err == nil && got == want {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no process %d in %s", pid, c.Name)
}

// Stop powers the container off as a machine is (SIGRTMIN+4 to systemd)
// and waits for nspawn to exit; if it does not, it kills the container's
// PID 1 and so every process inside. Then its cgroups are removed. It is
// called when the test ends; calling it again returns the first result.
func (c *Container) Stop() error {
	c.stopOnce.Do(func() { c.stopErr = c.stop() })
	return c.stopErr
}

func (c *Container) stop() error {
	var errs []error
	if !c.exited() {
		if !c.poweroff(poweroffLimit) {
			errs = append(errs, fmt.Errorf("%s did not power off within %s; killed", c.Name, poweroffLimit))
			if c.pid1 > 0 {
				_ = syscall.Kill(c.pid1, syscall.SIGKILL)
			}
			if !c.waitExit(killLimit) {
				_ = syscall.Kill(-c.nspawn.Process.Pid, syscall.SIGKILL)
				if !c.waitExit(killLimit) {
					errs = append(errs, fmt.Errorf("systemd-nspawn of %s survived SIGKILL", c.Name))
				}
			}
		}
	}
	if err := removeCgroups(c.cgroups, killLimit); err != nil {
		errs = append(errs, err)
	}
	// nspawn's mount propagation directory, named for the machine: it
	// removes it itself, and a killed one leaves it.
	_ = os.Remove(filepath.Join("/run/systemd/nspawn/propagate", c.Name))
	return errors.Join(errs...)
}

// poweroff asks systemd to power off, again every second until nspawn
// exits or limit passes: a PID 1 ignores a signal it has no handler for
// yet, as systemd early in its boot does.
func (c *Container) poweroff(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c.pid1 > 0 {
			_ = syscall.Kill(c.pid1, sigPoweroff)
		} else {
			// Not booted as far as an init: nspawn passes SIGTERM on
			// to the container as a halt.
			_ = c.nspawn.Process.Signal(syscall.SIGTERM)
		}
		if c.waitExit(time.Second) {
			return true
		}
	}
	return false
}

func (c *Container) waitExit(limit time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(limit):
		return false
	}
}

func (c *Container) cleanup() {
	if c.tb.Failed() {
		if !c.exited() {
			c.tb.Logf("---- journal of %s (last 300 lines) ----\n%s", c.Name, c.Journal(300))
		}
	}
	err := c.Stop()
	if c.tb.Failed() {
		c.tb.Logf("---- console of %s ----\n%s", c.Name, c.ConsoleTail(8000))
	}
	if err != nil {
		c.tb.Errorf("stop %s: %v", c.Name, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
