// Package exec is the driver for execs: commands the host runs when their
// guards say a run is needed, like Puppet's exec and Salt's cmd.run, made
// safe to run unattended on every reconcile.
//
// An exec is idempotent by construction: it has at least one guard.
// Creates names a path beneath the root (looked at without following a
// symlink): while something is there, there is nothing to do. Unless is
// a command: exit 0 means nothing to do. OnlyIf is a command: anything
// but exit 0 means nothing to do. RefreshOnly: the exec runs only when
// refreshed, by a resource that notifies it, never by itself. With
// several guards it runs only when every one of them says so.
//
// Observe runs Unless and OnlyIf: every plan and every drift check does.
// A guard must therefore change nothing; that is its author's contract,
// which the host cannot check. An exec that would run is observed as
// absent when it has Creates (what it creates is absent: the plan says
// "created"), and as differing in "run" otherwise (the plan says
// "updated"); the note says why it would run or not, in the guards' own
// terms. Apply runs it when the guards, asked again, still say so. Remove
// undoes nothing: an exec no longer declared has run, and what it did is
// not the host's to guess back.
//
// A command is an argv, never given to a shell unless its first element
// names one. That program is an absolute path, or a name looked up on
// DefaultPath (or the PATH the spec's env sets), outside the root. The
// command runs on the machine itself, not in a chroot: on a node the root
// prefix is "/", and a sandbox root prefix only moves where Creates and
// Cwd are looked up (and where HOME points); the command itself sees the
// machine, and finds the root prefix in MESH_ROOT.
//
// A command runs as the spec's user and group (root by default) of the
// root's own etc/passwd and etc/group, with that user's supplementary
// groups from the root's etc/group and none of the host's; with standard
// input empty (/dev/null); in its working directory, Cwd beneath the
// root or the root itself, opened without following a symlink; and with
// an environment of its own (see environment): nothing of the host's
// leaks into it. A host that does not run as root (tests, demos) runs
// every command as itself, and refuses a spec that names another user.
//
// Nothing a run starts outlives it. The command runs in a process group
// of its own, and where a service manager runs (the root is "/" and
// /run/systemd/system exists), also in a transient scope unit of its own
// (systemd-run --scope), made before the command starts, so that even a
// daemon that calls setsid and forks twice is in it. At its timeout
// (Timeout, DefaultTimeout: each run, a guard's or the command's, has the
// whole of it) or when the reconcile is cancelled, the run is killed with
// SIGKILL: every process of its scope, and its process group. Once the
// command exits by itself, whatever it left running is killed the same
// way: an exec is a step that ends, and a daemon is a unit's to run.
//
// Without a service manager only the process group is killed: a process
// that leaves it (setsid, setpgid; a daemon that forks twice) escapes the
// kill, and the host stops reading the output it holds open 5 s after
// the command ended. No process-wide setting (a child subreaper) is made
// to catch it, since that would change the host process itself: run a
// service manager where execs may start daemons.
//
// What a run prints, standard output and standard error together in the
// order it printed them, is kept to its first and last 32 KiB, secrets
// redacted (Options.Redact, and values that look like credentials:
// password=..., token: ..., a URL's password, an Authorization header, a
// bearer token), and made printable (drivers.Shown). A failed run's
// error carries the last of it; a successful one's is in ApplyNote.
//
// The tests run real commands (/bin/sh and coreutils) in temporary roots,
// without a service manager; those that run as another user need root and
// skip otherwise. The TestLive tests run under a real systemd, as PID 1,
// on the root "/": they skip unless MESH_LIVE_MANAGER=1 and
// /run/systemd/system exists.
package exec

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the exec driver.
var (
	// ErrFailed is returned when a command (or a guard) ran and did not
	// succeed: an exit code not among the success codes, or a signal.
	// The error carries the command, how it ended and the last of what it
	// printed.
	ErrFailed = errors.New("command failed")
	// ErrTimeout is returned when a run outlasts the exec's timeout: it
	// was killed, with everything it started.
	ErrTimeout = errors.New("command timed out")
	// ErrScope is returned when a service manager runs but systemd-run
	// could not give a run its scope: the command did not start.
	ErrScope = errors.New("no scope for the command")
)

// Options configure a Driver.
type Options struct {
	// Redact returns its argument with every secret value the host knows
	// replaced; it is applied to all the driver shows of a command and
	// of what it printed. Nil redacts only what looks like a credential.
	Redact func(string) string
	// ManagerRunning reports whether a service manager runs the root,
	// which then gives each run a scope. When nil: the root is "/" and
	// /run/systemd/system exists.
	ManagerRunning func() bool
}

// Driver runs execs under a root.
type Driver struct {
	root           *rootfs.Root
	redact         func(string) string
	managerRunning func() bool

	// systemd is the version of systemd-run, once asked.
	versionMu sync.Mutex
	systemd   int

	mu sync.Mutex
	// turns let one Observe, Apply or Refresh of an exec at a time
	// through: a guard never runs while its command does, nor the
	// command twice at once (a reconcile applies resources in parallel,
	// and a refresh may come while its exec is applied).
	turns map[string]*drivers.Turn
	// notes are what each exec's last Apply did, for ApplyNote.
	notes map[string]string
}

var (
	_ drivers.Driver    = (*Driver)(nil)
	_ drivers.Noter     = (*Driver)(nil)
	_ drivers.Refresher = (*Driver)(nil)
)

// New returns the exec driver for root.
func New(root *rootfs.Root, opts Options) *Driver {
	d := &Driver{
		root:           root,
		redact:         opts.Redact,
		managerRunning: opts.ManagerRunning,
		turns:          map[string]*drivers.Turn{},
		notes:          map[string]string{},
	}
	if d.managerRunning == nil {
		d.managerRunning = root.Booted
	}
	return d
}

// job checks the call and the spec and makes the spec ready to run.
func (d *Driver) job(ctx context.Context, spec drivers.Spec) (*job, error) {
	s, err := drivers.SpecAs[*drivers.ExecSpec](ctx, spec, "exec")
	if err != nil {
		return nil, err
	}
	return d.prepare(s)
}

// Observe reports whether the exec would run, evaluating its guards: it
// runs Unless and OnlyIf, which must change nothing.
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	j, err := d.job(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	done, err := d.turn(ctx, j.spec.Name)
	if err != nil {
		return drivers.Observation{}, err
	}
	defer done()
	v, err := d.judge(ctx, j, false)
	if err != nil {
		return drivers.Observation{}, err
	}
	switch {
	case !v.run:
		return drivers.Observation{Exists: true, InSync: true, Seen: v.seen, Note: v.note()}, nil
	case v.absent:
		return drivers.Observation{Differs: []string{"absent"}, Note: v.note()}, nil
	}
	return drivers.Observation{Exists: true, Differs: []string{"run"}, Seen: v.seen, Note: v.note()}, nil
}

// Apply runs the command if its guards, evaluated again, say so. It
// reports Created when it ran to create what Creates names, Updated when
// it ran otherwise, Unchanged when it did not run.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	j, err := d.job(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	done, err := d.turn(ctx, j.spec.Name)
	if err != nil {
		return drivers.Unchanged, err
	}
	defer done()
	v, err := d.judge(ctx, j, false)
	if err != nil {
		d.note(j.spec.Name, "")
		return drivers.Unchanged, err
	}
	if !v.run {
		d.note(j.spec.Name, v.note())
		return drivers.Unchanged, nil
	}
	note, err := d.execute(ctx, j)
	d.note(j.spec.Name, note)
	switch {
	case err != nil:
		return drivers.Unchanged, err
	case v.absent:
		return drivers.Created, nil
	}
	return drivers.Updated, nil
}

// Refresh runs the command because a resource it listens to changed,
// refresh-only or not, when Unless and OnlyIf allow it and nothing is at
// Creates; since does not matter: a run owed is run whenever it comes.
func (d *Driver) Refresh(ctx context.Context, spec drivers.Spec, _ time.Time) (drivers.Refreshed, error) {
	j, err := d.job(ctx, spec)
	if err != nil {
		return drivers.Refreshed{}, err
	}
	done, err := d.turn(ctx, j.spec.Name)
	if err != nil {
		return drivers.Refreshed{}, err
	}
	defer done()
	v, err := d.judge(ctx, j, true)
	if err != nil {
		return drivers.Refreshed{}, err
	}
	if !v.run {
		note := "not run, though refreshed: " + v.because
		if v.exists {
			note += " (while what it creates exists, a refresh does nothing)"
		}
		return drivers.Refreshed{Note: note}, nil
	}
	note, err := d.execute(ctx, j)
	if err != nil {
		return drivers.Refreshed{}, err
	}
	return drivers.Refreshed{Did: "ran", Note: note}, nil
}

// Remove does nothing: an exec no longer declared has nothing the host
// could undo.
func (d *Driver) Remove(ctx context.Context, spec drivers.Spec) error {
	_, err := drivers.SpecAs[*drivers.ExecSpec](ctx, spec, "exec")
	return err
}

// ApplyNote says what the last Apply of the exec did: why it did not
// run, or how its run ended and the last of what it printed.
func (d *Driver) ApplyNote(spec drivers.Spec) string {
	s, ok := spec.(*drivers.ExecSpec)
	if !ok || s == nil {
		return ""
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.notes[s.Name]
}

func (d *Driver) note(name, note string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.notes[name] = note
}

// turn waits until no other run of the exec name is under way: a
// migration must never run twice at once.
func (d *Driver) turn(ctx context.Context, name string) (func(), error) {
	d.mu.Lock()
	t := d.turns[name]
	if t == nil {
		t = drivers.NewTurn()
		d.turns[name] = t
	}
	d.mu.Unlock()
	done, err := t.Take(ctx)
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", name, err)
	}
	return done, nil
}

// verdict is what the guards say.
type verdict struct {
	run bool
	// absent: Creates is stated and nothing is there. exists: something
	// is there.
	absent, exists bool
	// because is what the guards said, in their own terms ("/x does not
	// exist; unless `test -f /y` exited 1"); refreshOnly that the exec
	// waits for a refresh.
	because     string
	refreshOnly bool
	// seen is the verdict in short, for drift records: "" when absent.
	seen string
}

func (v verdict) note() string {
	switch {
	case v.run:
		return "would run: " + v.because
	case v.refreshOnly:
		return "runs only when refreshed"
	}
	return v.because + ": nothing to do"
}

// judge evaluates the guards, cheapest first, and stops at the first
// that says there is nothing to do. A refresh ignores RefreshOnly.
func (d *Driver) judge(ctx context.Context, j *job, refresh bool) (verdict, error) {
	s := j.spec
	var because, seen []string
	if refresh {
		because = append(because, "refreshed")
	}
	if s.Creates != "" {
		_, err := d.root.Lstat(s.Creates)
		switch {
		case err == nil:
			return verdict{exists: true, because: s.Creates + " exists", seen: s.Creates + " exists"}, nil
		case errors.Is(err, fs.ErrNotExist):
			because = append(because, s.Creates+" does not exist")
		default:
			return verdict{}, fmt.Errorf("exec %s: creates: %w", s.Name, err)
		}
	}
	if s.RefreshOnly && !refresh {
		return verdict{refreshOnly: true, because: "refresh only", seen: "refresh only"}, nil
	}
	for _, g := range []struct {
		what string
		argv []string
		runs func(code int) bool
	}{
		{"unless", s.Unless, func(code int) bool { return code != 0 }},
		{"onlyif", s.OnlyIf, func(code int) bool { return code == 0 }},
	} {
		if g.argv == nil {
			continue
		}
		res, err := d.run(ctx, j, g.what, g.argv)
		if err != nil {
			return verdict{}, err
		}
		if res.code < 0 {
			return verdict{}, failed(j, g.what, g.argv, res.status+": it answered neither yes nor no", res.output)
		}
		said := fmt.Sprintf("%s exited %d", j.show(g.what, g.argv), res.code)
		short := g.what + " exited " + strconv.Itoa(res.code)
		if !g.runs(res.code) {
			return verdict{because: said, seen: short}, nil
		}
		because, seen = append(because, said), append(seen, short)
	}
	v := verdict{run: true, absent: s.Creates != "", because: strings.Join(because, "; ")}
	if !v.absent {
		v.seen = strings.Join(seen, ", ")
		if v.seen == "" {
			v.seen = "refreshed"
		}
	}
	return v, nil
}

// execute runs the command and says how it went: the error of a run
// that did not succeed, or a note on one that did.
func (d *Driver) execute(ctx context.Context, j *job) (string, error) {
	res, err := d.run(ctx, j, "command", j.spec.Command)
	if err != nil {
		return "", err
	}
	if !j.success(res.code) {
		codes := make([]string, len(j.codes))
		for i, c := range j.codes {
			codes[i] = strconv.Itoa(c)
		}
		return "", failed(j, "command", j.spec.Command, res.status+" (success: "+strings.Join(codes, ", ")+")", res.output)
	}
	note := "ran: " + res.status
	if c := j.spec.Creates; c != "" {
		if _, err := d.root.Lstat(c); errors.Is(err, fs.ErrNotExist) {
			note += "; yet " + c + " still does not exist: it will run again"
		}
	}
	if out := strings.TrimSpace(res.output); out != "" {
		note += "; output:\n" + lastOf(out, noteBytes)
	}
	return note, nil
}

// failed is the error of a command that ran and did not succeed.
func failed(j *job, what string, argv []string, how, out string) error {
	if out = strings.TrimSpace(out); out != "" {
		out = "; output:\n" + lastOf(out, errorBytes)
	} else {
		out = "; no output"
	}
	return fmt.Errorf("exec %s: %s: %w: %s%s", j.spec.Name, j.show(what, argv), ErrFailed, how, out)
}
