// Package pkg is the driver for packages: a package is present or absent
// by name, never at a version. It works through whatever package manager
// the machine has: dpkg with apt-get, pacman, apk, or rpm with dnf, each a
// Backend that runs the manager's own tools against the root prefix.
//
// The driver does not choose versions, add repositories, refresh package
// lists, or resolve a virtual package to the package that provides it: it
// asks the manager to install or remove a name and reports what the manager
// said, its message and exit code, when that fails. A hung tool is killed,
// with everything it started, at Options.Timeout.
//
// The tests install and remove a .deb they build with dpkg-deb, into a
// temporary root with a dpkg database of its own, through the real dpkg and
// apt-get: they need the Debian packages dpkg and apt (priority required:
// on every Debian system), and run as root or not (dpkg is then given
// --force-not-root).
package pkg

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the package driver.
var (
	// ErrNoSource is returned when there is nowhere to install a package
	// from: no .deb of that name in Options.DebDir, or a root prefix with
	// no apt setup of its own.
	ErrNoSource = errors.New("no source for package")
	// ErrNotInstalled is returned when the package manager reported
	// success but the package is still not installed: the name is
	// perhaps a virtual package, provided by a package of another name.
	ErrNotInstalled = errors.New("package not installed after install")
)

// Backend is what the driver needs of a package manager.
type Backend interface {
	// Installed reports whether the package is installed.
	Installed(ctx context.Context, name string) (bool, error)
	// Install installs the package.
	Install(ctx context.Context, name string) error
	// Remove removes the package.
	Remove(ctx context.Context, name string) error
}

// DefaultTimeout is how long an operation may take when Options.Timeout
// is zero: long enough for a large download and its maintainer scripts.
const DefaultTimeout = 10 * time.Minute

// Options configure a Driver.
type Options struct {
	// Backend is the package manager to use. When nil it is a Dpkg
	// installing from DebDir if DebDir is set, else Detect(root).
	Backend Backend
	// DebDir is a directory of .deb files to install from with dpkg
	// instead of apt-get; used only when Backend is nil.
	DebDir string
	// Timeout bounds each Observe, Apply and Remove; zero means
	// DefaultTimeout.
	Timeout time.Duration
}

// Driver manages packages in a root through a Backend.
type Driver struct {
	// backend is the package manager, found when first needed: finding
	// it looks along PATH for four tools, and most reconciles declare no
	// package.
	backend func() Backend
	timeout time.Duration
	// turn lets one change through at a time: a package manager holds a
	// lock while it works, and a reconcile applies resources in parallel.
	turn *drivers.Turn
}

var _ drivers.Driver = (*Driver)(nil)

// New returns the package driver for root.
func New(root *rootfs.Root, opts Options) *Driver {
	d := &Driver{timeout: opts.Timeout, turn: drivers.NewTurn()}
	switch {
	case opts.Backend != nil:
		d.backend = func() Backend { return opts.Backend }
	case opts.DebDir != "":
		b := NewDpkg(root, opts.DebDir)
		d.backend = func() Backend { return b }
	default:
		d.backend = sync.OnceValue(func() Backend { return Detect(root) })
	}
	if d.timeout <= 0 {
		d.timeout = DefaultTimeout
	}
	return d
}

// Observe reports whether the package is installed, against the state the
// spec asks for. A package that should be absent and is installed differs
// in "present".
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	installed, err := d.backend().Installed(ctx, s.Name)
	if err != nil {
		return drivers.Observation{}, fmt.Errorf("package %s: %w", s.Name, err)
	}
	return observation(s, installed), nil
}

func observation(s *drivers.PackageSpec, installed bool) drivers.Observation {
	want := state(s) == drivers.Present
	switch {
	case installed && want:
		return drivers.Observation{Exists: true, InSync: true, Seen: "installed"}
	case installed:
		return drivers.Observation{Exists: true, Differs: []string{"present"}, Seen: "installed"}
	case want:
		return drivers.Observation{Differs: []string{"absent"}}
	}
	return drivers.Observation{InSync: true}
}

// Apply installs a package that should be present (Created) or removes one
// that should be absent (Updated: the resource is there and changes state),
// and reports Unchanged when it already stands as the spec says.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	done, err := d.turn.Take(ctx)
	if err != nil {
		return drivers.Unchanged, fmt.Errorf("package %s: %w", s.Name, err)
	}
	defer done()
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	installed, err := d.backend().Installed(ctx, s.Name)
	if err != nil {
		return drivers.Unchanged, fmt.Errorf("package %s: %w", s.Name, err)
	}
	want := state(s) == drivers.Present
	switch {
	case installed == want:
		return drivers.Unchanged, nil
	case !want:
		if err := d.backend().Remove(ctx, s.Name); err != nil {
			return drivers.Unchanged, fmt.Errorf("remove package %s: %w", s.Name, err)
		}
		return drivers.Updated, nil
	}
	if err := d.backend().Install(ctx, s.Name); err != nil {
		return drivers.Unchanged, fmt.Errorf("install package %s: %w", s.Name, err)
	}
	// A manager can succeed without installing the name asked for (apt
	// installs a virtual package's provider); say so rather than report a
	// change every later Apply would repeat.
	if installed, err := d.backend().Installed(ctx, s.Name); err != nil {
		return drivers.Unchanged, fmt.Errorf("package %s: after install: %w", s.Name, err)
	} else if !installed {
		return drivers.Unchanged, fmt.Errorf("package %s: %w: the package manager succeeded, but nothing of that name is installed (a virtual package? name the package that provides it)", s.Name, ErrNotInstalled)
	}
	return drivers.Created, nil
}

// Remove removes a package the spec had present; removing one that is not
// installed succeeds. A spec that had the package absent owns nothing, so
// removing it does nothing.
func (d *Driver) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return err
	}
	// Only the name counts: the reconciler removes with the spec
	// drivers.SpecForRemoval gives, whose state says nothing of what
	// was applied.
	done, err := d.turn.Take(ctx)
	if err != nil {
		return fmt.Errorf("package %s: %w", s.Name, err)
	}
	defer done()
	ctx, cancel := drivers.WithTimeout(ctx, d.timeout, drivers.ErrTimeout)
	defer cancel()
	installed, err := d.backend().Installed(ctx, s.Name)
	if err != nil {
		return fmt.Errorf("package %s: %w", s.Name, err)
	}
	if !installed {
		return nil
	}
	if err := d.backend().Remove(ctx, s.Name); err != nil {
		return fmt.Errorf("remove package %s: %w", s.Name, err)
	}
	return nil
}

// validName is a package name every backend accepts as one name: no glob
// characters (dpkg-query reads a pattern), no leading dash (a tool would
// read an option), no spaces or slashes.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._@:-]*$`)

// spec checks the context and the spec every call starts with.
func (d *Driver) spec(ctx context.Context, spec drivers.Spec) (*drivers.PackageSpec, error) {
	s, err := drivers.SpecAs[*drivers.PackageSpec](ctx, spec, "package")
	if err != nil {
		return nil, err
	}
	if len(s.Name) > 255 || !validName.MatchString(s.Name) {
		return nil, fmt.Errorf("package %q: %w: not a package name (letters, digits and +._@:- after a letter or digit)", s.Name, drivers.ErrInvalidSpec)
	}
	if st := state(s); st != drivers.Present && st != drivers.Absent {
		return nil, fmt.Errorf("package %s: %w: state %q is neither %q nor %q", s.Name, drivers.ErrInvalidSpec, s.State, drivers.Present, drivers.Absent)
	}
	return s, nil
}

// state is the spec's state, present by default.
func state(s *drivers.PackageSpec) string {
	if s.State == "" {
		return drivers.Present
	}
	return s.State
}
