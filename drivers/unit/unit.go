// Package unit is the driver for systemd units: a unit file's content, and
// whether the unit is enabled and active.
//
// Unit files land in the root's /etc/systemd/system, written atomically.
// Enablement goes through the real systemctl with --root, which works on
// the files alone, with or without a service manager. Whether a unit is
// active is a service manager's business: only when one runs (on the root
// "/", where /run/systemd/system exists, as sd_booted(3) checks) does the
// driver reload the manager, restart a unit whose file changed, and start
// or stop it. Where none runs, activity is neither observed nor applied,
// and the driver's note says "enablement only" rather than pretend that a
// service started.
//
// A unit file is verified with systemd-analyze verify before it is
// written, when systemd-analyze is installed (the note says when it is
// not). systemd-analyze 252 cannot verify with --root a unit file that is
// not yet installed (it answers "Unit ... not found"), so it verifies a
// temporary copy against this machine: the syntax, and that the commands
// it names exist here; the units it depends on are not checked
// (--recursive-errors=no), since they may be declared too.
//
// The tests run the real systemctl --root and systemd-analyze on a
// temporary root, as root or not: they need the Debian package systemd
// (priority important: on a standard system, not in a minimal container
// image), and skip, saying so, without it. No manager need run: a fake
// systemctl stands in for one.
package unit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
)

// Errors of the unit driver.
var (
	// ErrToolFailed is returned when systemctl or systemd-analyze ran and
	// failed: the error carries the command, its exit code and its own
	// message.
	ErrToolFailed = errors.New("systemd tool failed")
	// ErrTimeout is returned when an operation runs past Options.Timeout;
	// the tool it was running is killed with everything it started.
	ErrTimeout = errors.New("systemd tool timed out")
	// ErrNotRegular is returned when something the host does not replace
	// or remove is at a unit file's path: a directory, a fifo or a device
	// for Apply (which replaces a symlink), anything but a regular file (a
	// mask's symlink too) for Remove.
	ErrNotRegular = errors.New("not a regular file")
)

// Dir is where unit files land, beneath the root.
const Dir = "/etc/systemd/system"

// DefaultTimeout is how long an operation may take when Options.Timeout is
// zero: longer than systemd's own default start timeout (90s).
const DefaultTimeout = 5 * time.Minute

// Options configure a Driver.
type Options struct {
	// Timeout bounds each Observe, Apply and Remove; zero means
	// DefaultTimeout.
	Timeout time.Duration
	// ManagerRunning reports whether a service manager runs the root.
	// When nil: the root is "/" and /run/systemd/system exists. A root
	// prefix other than "/" has no manager of its own.
	ManagerRunning func() bool
}

// Driver manages systemd units in a root.
type Driver struct {
	root           *drivers.Root
	timeout        time.Duration
	managerRunning func() bool
	// turn lets one change through at a time: systemctl enable and a
	// manager's daemon-reload see every unit, and a reconcile applies
	// resources in parallel.
	turn *drivers.Turn
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Noter  = (*Driver)(nil)
)

// New returns the unit driver for root.
func New(root *drivers.Root, opts Options) *Driver {
	d := &Driver{root: root, timeout: opts.Timeout, managerRunning: opts.ManagerRunning, turn: drivers.NewTurn()}
	if d.timeout <= 0 {
		d.timeout = DefaultTimeout
	}
	if d.managerRunning == nil {
		d.managerRunning = func() bool { return booted(root) }
	}
	return d
}

// booted is sd_booted(3) for the root: only "/" can be run by this
// machine's service manager.
func booted(root *drivers.Root) bool {
	if root.Dir() != "/" {
		return false
	}
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// ApplyNote says what Apply cannot do here: start or stop anything when no
// service manager runs, verify anything without systemd-analyze.
func (d *Driver) ApplyNote(drivers.Spec) string {
	var notes []string
	if !d.managerRunning() {
		notes = append(notes, d.enablementOnly())
	}
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		notes = append(notes, "not verified: systemd-analyze is not installed")
	}
	return strings.Join(notes, "; ")
}

func (d *Driver) enablementOnly() string {
	return "enablement only: no service manager runs in " + d.root.Dir()
}

// Observe reports how the unit stands against spec: its file's content,
// whether it is enabled, and, when a service manager runs, whether it is
// active. A symlink at the unit's path (a mask) is reported as existing
// with a "type" difference, and never followed.
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, ErrTimeout)
	defer cancel()
	managed := d.managerRunning()
	f, err := d.find(ctx, s, managed)
	if err != nil {
		return drivers.Observation{}, err
	}
	obs := drivers.Observation{Differs: []string{"absent"}}
	if f != nil {
		differs := f.differs(s, managed)
		obs = drivers.Observation{Exists: true, InSync: len(differs) == 0, Differs: differs, Seen: f.seen()}
	}
	if !managed {
		obs.Note = d.enablementOnly()
	}
	return obs, nil
}

// Apply verifies the unit file and writes it if its content differs,
// enables or disables the unit as the spec says, and, when a service
// manager runs, reloads it after a change, restarts an active unit whose
// file changed, and starts or stops the unit as the spec says.
//
// When the content changes, an enabled unit is disabled under its old file
// first, so that the links its old [Install] section made go with it. A
// unit asked to be enabled that systemctl leaves otherwise (static: it has
// no [Install] section) is an invalid spec.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	done, err := d.turn.Take(ctx)
	if err != nil {
		return drivers.Unchanged, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	defer done()
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, ErrTimeout)
	defer cancel()
	managed := d.managerRunning()
	f, err := d.find(ctx, s, managed)
	if err != nil {
		return drivers.Unchanged, err
	}
	action := drivers.Updated
	switch {
	case f == nil:
		action = drivers.Created
	case f.kind != "file" && f.kind != "symlink":
		// Renaming over a symlink replaces the link itself (a mask, say);
		// anything else is not the host's to replace.
		return drivers.Unchanged, fmt.Errorf("unit %s: %w: a %s is at %s; the host does not replace it", s.Name, ErrNotRegular, f.kind, d.path(s))
	}
	isFile := f != nil && f.kind == "file"
	newContent := !isFile || !bytes.Equal(f.content, []byte(s.Content))
	wasEnabled := isFile && enabled(f.enabled)
	wasActive := isFile && managed && active(f.active)
	changed := false

	if newContent {
		if err := d.verify(ctx, s); err != nil {
			return drivers.Unchanged, err
		}
		if wasEnabled {
			if err := d.systemctl(ctx, "--root="+d.root.Dir(), "disable", "--", s.Name); err != nil {
				return drivers.Unchanged, fmt.Errorf("unit %s: disable before rewriting: %w", s.Name, err)
			}
			wasEnabled = false
		}
		if err := d.write(s); err != nil {
			return drivers.Unchanged, err
		}
		changed = true
	}
	switch {
	case s.Enabled && !wasEnabled:
		if err := d.enable(ctx, s); err != nil {
			return drivers.Unchanged, err
		}
		changed = true
	case !s.Enabled && wasEnabled:
		if err := d.systemctl(ctx, "--root="+d.root.Dir(), "disable", "--", s.Name); err != nil {
			return drivers.Unchanged, fmt.Errorf("unit %s: %w", s.Name, err)
		}
		changed = true
	}
	if managed {
		if changed {
			if err := d.systemctl(ctx, "daemon-reload"); err != nil {
				return drivers.Unchanged, fmt.Errorf("unit %s: %w", s.Name, err)
			}
		}
		var verb string
		switch {
		case s.Active && !wasActive:
			verb = "start"
		case s.Active && newContent:
			verb = "restart"
		case !s.Active && wasActive:
			verb = "stop"
		}
		if verb != "" {
			if err := d.systemctl(ctx, verb, "--", s.Name); err != nil {
				return drivers.Unchanged, fmt.Errorf("unit %s: %w", s.Name, err)
			}
			changed = true
		}
	}
	if !changed {
		return drivers.Unchanged, nil
	}
	return action, nil
}

// Remove stops the unit when a service manager runs, disables it, and
// removes its file. A missing file is not an error; anything else at the
// path (a mask's symlink, a directory) is not what the host wrote, so it
// stays and Remove says what is there.
func (d *Driver) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return err
	}
	done, err := d.turn.Take(ctx)
	if err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	defer done()
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, ErrTimeout)
	defer cancel()
	st, err := d.root.Lstat(d.path(s))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if kind := drivers.FileType(uint32(st.Mode)); kind != "file" {
		return fmt.Errorf("remove unit %s: %w: a %s is at %s; the host removes only what it owns, so it is %w", s.Name, ErrNotRegular, kind, d.path(s), drivers.ErrLeftInPlace)
	}
	managed := d.managerRunning()
	if managed {
		state, err := d.state(ctx, "is-active", "--", s.Name)
		if err != nil {
			return fmt.Errorf("unit %s: %w", s.Name, err)
		}
		if active(state) {
			if err := d.systemctl(ctx, "stop", "--", s.Name); err != nil {
				return fmt.Errorf("unit %s: %w", s.Name, err)
			}
		}
	}
	if err := d.systemctl(ctx, "--root="+d.root.Dir(), "disable", "--", s.Name); err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if err := d.root.Remove(d.path(s)); err != nil {
		return fmt.Errorf("remove unit %s: %w", s.Name, err)
	}
	if managed {
		if err := d.systemctl(ctx, "daemon-reload"); err != nil {
			return fmt.Errorf("unit %s: %w", s.Name, err)
		}
	}
	return nil
}

// validName is a unit name as systemd takes one: the characters
// unit_name_is_valid allows, and a unit type's suffix.
var validName = regexp.MustCompile(`^[A-Za-z0-9:_.\\@-]+\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$`)

// spec checks the context and the spec every call starts with, and that
// systemctl is there to call.
func (d *Driver) spec(ctx context.Context, spec drivers.Spec) (*drivers.UnitSpec, error) {
	s, err := drivers.SpecAs[*drivers.UnitSpec](ctx, spec, "unit")
	if err != nil {
		return nil, err
	}
	if len(s.Name) > 255 || !validName.MatchString(s.Name) {
		return nil, fmt.Errorf("unit %q: %w: not a unit name (name.service, name.timer, ...)", s.Name, drivers.ErrInvalidSpec)
	}
	if _, err := exec.LookPath("systemctl"); err != nil {
		return nil, fmt.Errorf("unit %s: %w: systemctl is not on PATH", s.Name, drivers.ErrToolMissing)
	}
	return s, nil
}

func (d *Driver) path(s *drivers.UnitSpec) string { return path.Join(Dir, s.Name) }

// PathOf is where the unit file of spec lies beneath the root
// (drivers.Located); empty for a spec that is not a unit's.
func (d *Driver) PathOf(spec drivers.Spec) string {
	s, ok := spec.(*drivers.UnitSpec)
	if !ok {
		return ""
	}
	return d.path(s)
}

// found is what is at a unit file's path.
type found struct {
	// kind is "file" for a regular file, else what is there instead:
	// "symlink", "directory", "fifo", "socket", "device".
	kind    string
	content []byte
	// enabled is what systemctl is-enabled says; active what systemctl
	// is-active says, when a manager runs.
	enabled, active string
}

// find looks at s's unit file without following a symlink there; nil
// means nothing is there.
func (d *Driver) find(ctx context.Context, s *drivers.UnitSpec, managed bool) (*found, error) {
	st, err := d.root.Lstat(d.path(s))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if kind := drivers.FileType(uint32(st.Mode)); kind != "file" {
		return &found{kind: kind}, nil
	}
	content, err := d.root.ReadFile(d.path(s))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	f := &found{kind: "file", content: content}
	if f.enabled, err = d.state(ctx, "--root="+d.root.Dir(), "is-enabled", "--", s.Name); err != nil {
		return nil, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if managed {
		if f.active, err = d.state(ctx, "is-active", "--", s.Name); err != nil {
			return nil, fmt.Errorf("unit %s: %w", s.Name, err)
		}
	}
	return f, nil
}

// differs names each respect in which f does not match s; activity only
// when a manager runs.
func (f *found) differs(s *drivers.UnitSpec, managed bool) []string {
	if f.kind != "file" {
		return []string{"type"}
	}
	var out []string
	if !bytes.Equal(f.content, []byte(s.Content)) {
		out = append(out, "content")
	}
	if enabled(f.enabled) != s.Enabled {
		out = append(out, "enabled")
	}
	if managed && active(f.active) != s.Active {
		out = append(out, "active")
	}
	return out
}

// seen is the content's digest and the states systemctl reported.
func (f *found) seen() string {
	if f.kind != "file" {
		return "type:" + f.kind
	}
	sum := sha256.Sum256(f.content)
	seen := "sha256:" + hex.EncodeToString(sum[:]) + " " + f.enabled
	if f.active != "" {
		seen += " " + f.active
	}
	return seen
}

// enabled is whether an is-enabled state is enabled; static, indirect,
// disabled, masked and the rest are not.
func enabled(state string) bool { return state == "enabled" || state == "enabled-runtime" }

// active is whether an is-active state is active; activating is not yet.
func active(state string) bool { return state == "active" || state == "reloading" }

// state runs a systemctl query (is-enabled, is-active), which says the
// state on stdout and exits non-zero for most of them.
func (d *Driver) state(ctx context.Context, args ...string) (string, error) {
	out, err := drivers.RunTool(ctx, nil, "systemctl", args...)
	if err != nil {
		return "", err
	}
	state, _, _ := strings.Cut(strings.TrimSpace(out.Stdout), "\n")
	if state == "" {
		return "", out.Failed(ErrToolFailed)
	}
	return state, nil
}

// systemctl runs systemctl, which must succeed.
func (d *Driver) systemctl(ctx context.Context, args ...string) error {
	out, err := drivers.RunTool(ctx, nil, "systemctl", args...)
	if err != nil {
		return err
	}
	if out.Code != 0 {
		return out.Failed(ErrToolFailed)
	}
	return nil
}

// enable enables the unit and checks that it is then enabled.
func (d *Driver) enable(ctx context.Context, s *drivers.UnitSpec) error {
	out, err := drivers.RunTool(ctx, nil, "systemctl", "--root="+d.root.Dir(), "enable", "--", s.Name)
	if err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if out.Code != 0 {
		return fmt.Errorf("unit %s: %w", s.Name, out.Failed(ErrToolFailed))
	}
	state, err := d.state(ctx, "--root="+d.root.Dir(), "is-enabled", "--", s.Name)
	if err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if !enabled(state) {
		return fmt.Errorf("unit %s: %w: it is to be enabled, but systemctl enable leaves it %s: %s", s.Name, drivers.ErrInvalidSpec, state, out.Message())
	}
	return nil
}

// write writes the unit file atomically and durably, making the
// directories to it if need be. A unit spec states no owner: the file is
// the host's, owned by the user it runs as (root on a node; whoever runs a
// sandbox).
func (d *Driver) write(s *drivers.UnitSpec) error {
	uid, gid := os.Geteuid(), os.Getegid()
	for _, dir := range []string{"/etc", "/etc/systemd", Dir} {
		if _, err := d.root.Mkdir(dir, 0o755, uid, gid); err != nil {
			return fmt.Errorf("unit %s: %w", s.Name, err)
		}
	}
	err := d.root.WriteFile(d.path(s), []byte(s.Content), drivers.WriteOptions{Mode: 0o644, UID: uid, GID: gid, Sync: true})
	if err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	return nil
}

// verify runs systemd-analyze verify on a temporary copy of the unit file,
// if systemd-analyze is installed. Its messages name the unit's path in
// the root rather than the copy's.
func (d *Driver) verify(ctx context.Context, s *drivers.UnitSpec) error {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		return nil // ApplyNote says the unit is not verified
	}
	tmp, err := os.MkdirTemp("", "mesh-host-verify-")
	if err != nil {
		return fmt.Errorf("unit %s: verify: %w", s.Name, err)
	}
	defer os.RemoveAll(tmp)
	file := filepath.Join(tmp, s.Name)
	if err := os.WriteFile(file, []byte(s.Content), 0o644); err != nil {
		return fmt.Errorf("unit %s: verify: %w", s.Name, err)
	}
	out, err := drivers.RunTool(ctx, nil, "systemd-analyze", "verify", "--man=no", "--recursive-errors=no", "--", file)
	if err != nil {
		return fmt.Errorf("unit %s: verify: %w", s.Name, err)
	}
	if out.Code != 0 {
		out.Cmdline = strings.ReplaceAll(out.Cmdline, file, d.path(s))
		out.Stdout = strings.ReplaceAll(out.Stdout, file, d.path(s))
		out.Stderr = strings.ReplaceAll(out.Stderr, file, d.path(s))
		return fmt.Errorf("unit %s: %w: systemd-analyze rejects it: %w", s.Name, drivers.ErrInvalidSpec, out.Failed(ErrToolFailed))
	}
	return nil
}
