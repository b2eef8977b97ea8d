// Package unit is the driver for systemd units: a unit's file, when the
// declaration writes it, and whether the unit is enabled and active.
//
// A unit declared with content has its file in the root's
// /etc/systemd/system, written atomically. A unit declared without
// content is one whose file someone else installs (a package's
// /lib/systemd/system/nginx.service): the host never writes, rewrites or
// removes that file, and holds only the unit's enablement and activity.
// Enablement goes through the real systemctl with --root, which works on
// the files alone, with or without a service manager.
//
// Whether a unit is active is a service manager's business: only when one
// runs the root (on "/", where /run/systemd/system exists, as sd_booted(3)
// checks) does the driver ask it, over the manager's own D-Bus interface
// (its private socket, /run/systemd/private, else the system bus) rather
// than text that systemctl prints. A unit's states are its properties; a
// start, stop, restart or reload is a job whose result the driver waits
// for; the manager is reloaded only when it says that a unit the driver
// touched needs it, and once for a batch (ApplyBatch). A job that fails
// carries the unit's last journal lines, bounded, made safe for a terminal
// and with secrets redacted. Where no manager runs, activity is neither
// observed nor applied, and the driver's note says "enablement only"
// rather than pretend that a service started.
//
// A Driver holds one connection to the manager, opened when first needed;
// whoever made the Driver closes it (Close). A Watch holds a connection of
// its own for as long as it runs.
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
// image), and skip, saying so, without it. The manager's side is tested
// against a real systemd only, by the TestLive tests: they skip unless
// MESH_LIVE_MANAGER=1 and a manager runs, and testbeds/systemd runs them in
// a container that boots one.
package unit

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the unit driver.
var (
	// ErrNotRegular is returned when something the host does not replace
	// or remove is at a unit file's path: a directory, a fifo or a device
	// for Apply (which replaces a symlink), anything but a regular file (a
	// mask's symlink too) for Remove.
	ErrNotRegular = errors.New("not a regular file")
	// ErrNotInstalled is returned by Apply of a unit declared without
	// content whose file is nowhere systemd loads units from.
	ErrNotInstalled = errors.New("unit not installed")
	// ErrMasked is returned by Apply of a masked unit that is to be
	// enabled or active: the host never unmasks a unit by itself.
	ErrMasked = errors.New("unit masked")
	// ErrManager is returned when the service manager cannot be reached
	// or refuses a call; the error carries the manager's words.
	ErrManager = errors.New("service manager call failed")
	// ErrJobFailed is returned when a start, stop, restart or reload job
	// ends other than "done", or the unit fails as it starts; the error
	// carries the job's result and the unit's last journal lines.
	ErrJobFailed = errors.New("unit job failed")
	// ErrNoManager is returned by Watch where no service manager runs:
	// nothing then tells of a unit that stops.
	ErrNoManager = errors.New("no service manager runs")
)

// Dir is where unit files land, beneath the root.
const Dir = "/etc/systemd/system"

// DefaultTimeout is how long an operation may take when Options.Timeout is
// zero: longer than systemd's own default start timeout (90s).
const DefaultTimeout = 5 * time.Minute

// Options configure a Driver.
type Options struct {
	// Timeout bounds each step of an Observe, Apply, Remove or Refresh: a
	// unit's files and enablement, a reload of the manager, a unit's job;
	// zero means DefaultTimeout. Past it the step fails with
	// drivers.ErrTimeout, and a job the manager was running for it goes
	// on there.
	Timeout time.Duration
	// ManagerRunning reports whether a service manager runs the root.
	// When nil: the root is "/" and /run/systemd/system exists. A root
	// prefix other than "/" has no manager of its own.
	ManagerRunning func() bool
	// Redact returns a line with every secret value the host knows
	// replaced; the journal lines a failed job's error carries pass
	// through it. Obvious credentials (password=..., token=...,
	// Authorization: ...) are redacted whether or not it is set.
	Redact func(string) string
}

// Driver manages systemd units in a root. Close it once done with it.
type Driver struct {
	root           *rootfs.Root
	timeout        time.Duration
	managerRunning func() bool
	redact         func(string) string
	// turn lets one change through at a time: systemctl enable and a
	// manager's daemon-reload see every unit, and a reconcile applies
	// resources in parallel.
	turn *drivers.Turn

	// mu guards conn, the connection to the manager, opened when first
	// needed and again when the manager dropped it.
	mu   sync.Mutex
	conn *sdbus.Conn
}

var (
	_ drivers.Driver       = (*Driver)(nil)
	_ drivers.Noter        = (*Driver)(nil)
	_ drivers.Located      = (*Driver)(nil)
	_ drivers.BatchApplier = (*Driver)(nil)
	_ drivers.Refresher    = (*Driver)(nil)
	_ drivers.Watcher      = (*Driver)(nil)
)

// New returns the unit driver for root. It connects to nothing until a
// call needs the manager.
func New(root *rootfs.Root, opts Options) *Driver {
	d := &Driver{root: root, timeout: opts.Timeout, managerRunning: opts.ManagerRunning, redact: opts.Redact, turn: drivers.NewTurn()}
	if d.timeout <= 0 {
		d.timeout = DefaultTimeout
	}
	if d.managerRunning == nil {
		d.managerRunning = root.Booted
	}
	return d
}

// Close closes the driver's connection to the service manager, if it
// opened one. The driver's owner calls it when done with the driver; a
// driver called again after Close connects again.
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.conn != nil {
		d.conn.Close()
		d.conn = nil
	}
	return nil
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

// Observe reports how the unit stands against spec: its file's content
// (for a unit declared with content), whether it is installed (for one
// without), masked, enabled, and, when a service manager runs, whether it
// is active. A symlink at the path of a unit declared with content (a
// mask) is reported as existing with a "type" difference, and never
// followed.
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	managed := d.managerRunning()
	v, err := d.look(ctx, s, managed)
	if err != nil {
		return drivers.Observation{}, err
	}
	obs := drivers.Observation{Differs: []string{"absent"}}
	if v.exists() {
		differs := v.differs(s, managed)
		obs = drivers.Observation{Exists: true, InSync: len(differs) == 0, Differs: differs, Seen: v.seen(s)}
	}
	var notes []string
	if !managed {
		notes = append(notes, d.enablementOnly())
	}
	if v.mask != "" {
		notes = append(notes, masked(s, v.mask))
	}
	obs.Note = strings.Join(notes, "; ")
	return obs, nil
}

// Apply makes one unit match spec: ApplyBatch of one.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	r := d.ApplyBatch(ctx, []drivers.Spec{spec})[0]
	return r.Action, r.Err
}

// ApplyBatch makes each unit match its spec, in three passes. First, for
// each unit, it verifies and writes the unit file if the declaration
// gives one and its content differs, and enables or disables the unit as
// the spec says. Then, when a service manager runs, it reloads the manager
// once if any unit it touched needs it (the manager says so, or has not
// loaded a unit file that is now there). Last, it starts, restarts (an
// active unit whose file changed) or stops each unit as its spec says, and
// waits for each job's result. A unit that fails does not stop the others.
//
// When the content changes, an enabled unit is disabled under its old file
// first, so that the links its old [Install] section made go with it. A
// unit asked to be enabled that systemctl leaves otherwise (static: it has
// no [Install] section) is an invalid spec. A masked unit asked to be
// enabled or active fails (ErrMasked); one declared without content whose
// file is nowhere systemd looks fails (ErrNotInstalled), and nothing is
// written for it.
func (d *Driver) ApplyBatch(ctx context.Context, specs []drivers.Spec) []drivers.Applied {
	results := make([]drivers.Applied, len(specs))
	changes := make([]*change, 0, len(specs))
	for i, spec := range specs {
		s, err := d.spec(ctx, spec)
		if err != nil {
			results[i] = drivers.Applied{Action: drivers.Unchanged, Err: err}
			continue
		}
		changes = append(changes, &change{index: i, spec: s})
	}
	if len(changes) > 0 {
		d.applyAll(ctx, changes)
	}
	for _, c := range changes {
		switch {
		case c.err != nil:
			results[c.index] = drivers.Applied{Action: drivers.Unchanged, Err: c.err}
		case !c.changed:
			results[c.index] = drivers.Applied{Action: drivers.Unchanged}
		case c.created:
			results[c.index] = drivers.Applied{Action: drivers.Created}
		default:
			results[c.index] = drivers.Applied{Action: drivers.Updated}
		}
	}
	return results
}

// change is one unit of a batch, and what applying it did.
type change struct {
	index int
	spec  *drivers.UnitSpec
	// before is the unit as found before anything was done to it.
	before *view
	// wrote is set once the unit's file was written, created once it was
	// written where nothing was; changed once anything was done.
	wrote, created, changed bool
	err                     error
}

// applyAll applies the batch's units in its three passes, each unit's
// failure recorded on its change.
func (d *Driver) applyAll(ctx context.Context, changes []*change) {
	done, err := d.turn.Take(ctx)
	if err != nil {
		for _, c := range changes {
			c.err = fmt.Errorf("unit %s: %w", c.spec.Name, err)
		}
		return
	}
	defer done()
	managed := d.managerRunning()
	for _, c := range changes {
		c.err = d.lay(ctx, c, managed)
	}
	if !managed {
		return
	}
	d.reloadFor(ctx, changes)
	for _, c := range changes {
		if c.err == nil {
			c.err = d.run(ctx, c)
		}
	}
}

// lay is the first pass for one unit: its file and its enablement.
func (d *Driver) lay(ctx context.Context, c *change, managed bool) error {
	s := c.spec
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	v, err := d.look(ctx, s, managed)
	if err != nil {
		return err
	}
	c.before = v
	wanted := s.Enabled || s.Active
	if s.Content == "" {
		if !v.exists() {
			return notInstalled(s)
		}
		if wanted && v.mask != "" {
			return fmt.Errorf("unit %s: %w", s.Name, errMasked(s, v.mask))
		}
		return d.enablement(ctx, c, enabled(v.enabled))
	}
	switch v.kind {
	case "":
		c.created = true
	case "file", "symlink":
		// Renaming over a symlink replaces the link itself (a mask, say);
		// anything else is not the host's to replace.
	default:
		return fmt.Errorf("unit %s: %w: a %s is at %s; the host does not replace it", s.Name, ErrNotRegular, v.kind, v.where)
	}
	if wanted && v.mask != "" {
		return fmt.Errorf("unit %s: %w", s.Name, errMasked(s, v.mask))
	}
	isFile := v.kind == "file"
	wasEnabled := isFile && enabled(v.enabled)
	if !isFile || string(v.content) != s.Content {
		if err := d.verify(ctx, s); err != nil {
			return err
		}
		if wasEnabled {
			if err := d.systemctl(ctx, "--root="+d.root.Dir(), "disable", "--", s.Name); err != nil {
				return fmt.Errorf("unit %s: disable before rewriting: %w", s.Name, err)
			}
			wasEnabled = false
		}
		if err := d.write(s); err != nil {
			return err
		}
		c.wrote, c.changed = true, true
	}
	return d.enablement(ctx, c, wasEnabled)
}

// enablement enables or disables the unit as its spec says.
func (d *Driver) enablement(ctx context.Context, c *change, wasEnabled bool) error {
	s := c.spec
	switch {
	case s.Enabled && !wasEnabled:
		if err := d.enable(ctx, s); err != nil {
			return err
		}
	case !s.Enabled && wasEnabled:
		if err := d.systemctl(ctx, "--root="+d.root.Dir(), "disable", "--", s.Name); err != nil {
			return fmt.Errorf("unit %s: %w", s.Name, err)
		}
	default:
		return nil
	}
	c.changed = true
	return nil
}

// Remove removes a unit file the host wrote: a regular file at the unit's
// path in /etc/systemd/system. When a service manager runs it stops the
// unit first (every instance of a template), and reloads the manager
// after if the manager says it must; it disables the unit. A unit with no
// file there is not the host's to remove (a packaged unit no longer
// declared): it is left as it is, enabled or running, and Remove succeeds.
// Anything else at the path (a mask's symlink, a directory) is not what
// the host wrote, so it stays and Remove says what is there.
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
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	kind, err := d.kindAt(s.Name, d.path(s))
	if err != nil {
		return err
	}
	switch kind {
	case "":
		return nil
	case "file":
	default:
		return fmt.Errorf("remove unit %s: %w: a %s is at %s; the host removes only what it owns, so it is %w", s.Name, ErrNotRegular, kind, d.path(s), drivers.ErrLeftInPlace)
	}
	managed := d.managerRunning()
	if managed {
		if err := d.stopAll(ctx, s.Name); err != nil {
			return err
		}
	}
	if err := d.systemctl(ctx, "--root="+d.root.Dir(), "disable", "--", s.Name); err != nil {
		return fmt.Errorf("unit %s: %w", s.Name, err)
	}
	if err := d.root.Remove(d.path(s)); err != nil {
		return fmt.Errorf("remove unit %s: %w", s.Name, err)
	}
	if managed {
		need, err := d.needsReload(ctx, s.Name, false, false)
		if err != nil {
			return err
		}
		if need {
			return d.daemonReload(ctx, s.Name)
		}
	}
	return nil
}

// validName is a unit name as systemd takes one: the characters
// unit_name_is_valid allows, at most one "@" and not first, and a unit
// type's suffix.
var validName = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|device|mount|automount|swap|target|path|timer|slice|scope)$`)

// spec checks the context and the spec every call starts with, and that
// systemctl is there to call.
func (d *Driver) spec(ctx context.Context, spec drivers.Spec) (*drivers.UnitSpec, error) {
	s, err := drivers.SpecAs[*drivers.UnitSpec](ctx, spec, "unit")
	if err != nil {
		return nil, err
	}
	if len(s.Name) > 255 || !validName.MatchString(s.Name) {
		return nil, fmt.Errorf("unit %q: %w: not a unit name (name.service, name.timer, name@instance.service, ...)", s.Name, drivers.ErrInvalidSpec)
	}
	switch template, instance := nameParts(s.Name); {
	case instance != "" && s.Content != "":
		return nil, fmt.Errorf("unit %s: %w: an instance has no file of its own: declare the template's file as a unit of its own, %s, and the instance without content", s.Name, drivers.ErrInvalidSpec, template)
	case template == s.Name && s.Active:
		return nil, fmt.Errorf("unit %s: %w: a template never runs: declare an instance of it (%s) active instead", s.Name, drivers.ErrInvalidSpec, strings.Replace(s.Name, "@.", "@NAME.", 1))
	}
	if _, err := exec.LookPath("systemctl"); err != nil {
		return nil, fmt.Errorf("unit %s: %w: systemctl is not on PATH", s.Name, drivers.ErrToolMissing)
	}
	return s, nil
}

// nameParts splits a unit name: for "getty@tty1.service", the template
// "getty@.service" and the instance "tty1"; for a template, itself and "";
// for any other name, "" and "".
func nameParts(name string) (template, instance string) {
	ext := path.Ext(name)
	base := strings.TrimSuffix(name, ext)
	at := strings.IndexByte(base, '@')
	if at < 0 {
		return "", ""
	}
	return base[:at+1] + ext, base[at+1:]
}

// isTemplate is whether name is a template's ("getty@.service"), which the
// manager never loads as a unit of its own.
func isTemplate(name string) bool {
	template, _ := nameParts(name)
	return template == name
}

func (d *Driver) path(s *drivers.UnitSpec) string { return path.Join(Dir, s.Name) }

var _ drivers.Located = (*Driver)(nil)

// PathOf is where the unit file of spec lies beneath the root
// (drivers.Located): where the host writes it, or would find the file it
// wrote to remove it. Empty for an instance, which never has a file of
// its own, and for a spec that is not a unit's.
func (d *Driver) PathOf(spec drivers.Spec) string {
	s, ok := spec.(*drivers.UnitSpec)
	if !ok {
		return ""
	}
	if _, instance := nameParts(s.Name); instance != "" {
		return ""
	}
	return d.path(s)
}

// notInstalled is Apply's error for a unit declared without content whose
// file is nowhere.
func notInstalled(s *drivers.UnitSpec) error {
	what := s.Name
	if template, instance := nameParts(s.Name); instance != "" {
		what += " nor " + template
	}
	return fmt.Errorf("unit %s: %w: it is declared without content, and no unit file %s is where systemd loads units from (%s): install what ships it, or declare its content", s.Name, ErrNotInstalled, what, strings.Join([]string{Dir, "/run/systemd/system", "/usr/lib/systemd/system", "..."}, ", "))
}

// errMasked is the error for a masked unit that is to be enabled or
// active: it names the mask and how to lift it.
func errMasked(s *drivers.UnitSpec, mask string) error {
	return fmt.Errorf("%w (%s): the host never unmasks a unit: run systemctl unmask %s to let it be enabled or started, or declare it enabled: false and active: false", ErrMasked, mask, s.Name)
}

// masked is Observe's note on a masked unit.
func masked(s *drivers.UnitSpec, mask string) string {
	return "masked (" + mask + "): the host never unmasks it; systemctl unmask " + s.Name + " lifts the mask"
}
