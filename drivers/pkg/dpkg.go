package pkg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Dpkg is the Debian backend. It asks dpkg-query about the root's own
// database (ROOT/var/lib/dpkg) and removes with dpkg --remove, which
// refuses to remove a package others depend on where apt-get would remove
// them too. It installs from the .deb files of a directory with dpkg
// --install when it has one, else with apt-get: on "/" as the machine is
// set up, and in any other root only if the root has an apt setup of its
// own (etc/apt), which apt-get then reads instead of the machine's.
//
// dpkg runs in a root other than "/" with --root (which puts its database
// at ROOT/var/lib/dpkg and runs maintainer scripts chrooted into ROOT), a
// log inside the root (or none), and --force-not-root when not run as
// root.
type Dpkg struct {
	root   *rootfs.Root
	debDir string
	// refreshed is set once apt-get update has run for a package apt
	// could not locate: lists are fetched once per process, not per miss.
	refreshed atomic.Bool
}

var _ Backend = (*Dpkg)(nil)

// NewDpkg returns the Debian backend for root; debDir, if not empty, is
// a directory of .deb files to install from instead of apt-get.
func NewDpkg(root *rootfs.Root, debDir string) *Dpkg {
	return &Dpkg{root: root, debDir: debDir}
}

func (b *Dpkg) other() bool { return b.root.Dir() != "/" }

// Installed asks dpkg-query for the package's status: installed is the
// second letter of db:Status-Abbrev being "i" ("ii", or "hi" for a
// package on hold); "rc" (removed, config files left) is not installed.
func (b *Dpkg) Installed(ctx context.Context, name string) (bool, error) {
	admindir := filepath.Join(b.root.Dir(), "var/lib/dpkg")
	out, err := drivers.RunTool(ctx, nil, "dpkg-query", "--admindir="+admindir, "-W", `--showformat=${db:Status-Abbrev}\n`, name)
	if err != nil {
		return false, err
	}
	switch out.Code {
	case 0:
	case 1: // no package of that name is known
		return false, nil
	default:
		return false, out.Failed(drivers.ErrToolFailed)
	}
	// One line an architecture the package is known for.
	for _, line := range strings.Split(out.Stdout, "\n") {
		if len(line) >= 2 && line[1] == 'i' {
			return true, nil
		}
	}
	return false, nil
}

// Install installs the package's .deb from the directory with dpkg, or the
// package by name with apt-get.
func (b *Dpkg) Install(ctx context.Context, name string) error {
	if b.debDir != "" {
		deb, err := b.findDeb(ctx, name)
		if err != nil {
			return err
		}
		return b.dpkg(ctx, "--install", deb)
	}
	return b.aptInstall(ctx, name)
}

// Remove removes the package with dpkg --remove: its configuration files
// stay ("rc"), as apt-get remove leaves them.
func (b *Dpkg) Remove(ctx context.Context, name string) error {
	return b.dpkg(ctx, "--remove", name)
}

// dpkg runs dpkg on the root.
func (b *Dpkg) dpkg(ctx context.Context, args ...string) error {
	var flags []string
	if b.other() {
		flags = append(flags, "--root="+b.root.Dir(), "--log="+b.logFile())
	}
	if os.Geteuid() != 0 {
		flags = append(flags, "--force-not-root")
	}
	out, err := drivers.RunTool(ctx, nil, "dpkg", append(flags, args...)...)
	if err != nil {
		return err
	}
	if out.Code != 0 {
		return out.Failed(drivers.ErrToolFailed)
	}
	return nil
}

// logFile is where dpkg logs for a root other than "/": the root's own
// var/log/dpkg.log if the root has a var/log (a directory, not a symlink
// out of it), else nowhere. dpkg's default is the machine's log.
func (b *Dpkg) logFile() string {
	d, err := b.root.OpenDir("/var/log")
	if err != nil {
		return os.DevNull
	}
	d.Close()
	return b.root.Host("/var/log/dpkg.log")
}

// findDeb finds the one .deb in the directory whose Package field is name,
// asking dpkg-deb rather than trusting file names. Two .debs of the package
// are refused: the driver never chooses a version.
func (b *Dpkg) findDeb(ctx context.Context, name string) (string, error) {
	entries, err := os.ReadDir(b.debDir)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrNoSource, name, err)
	}
	var found, names []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".deb") || !e.Type().IsRegular() {
			continue
		}
		deb := filepath.Join(b.debDir, e.Name())
		out, err := drivers.RunTool(ctx, nil, "dpkg-deb", "--field", deb, "Package")
		if err != nil {
			return "", err
		}
		if out.Code != 0 {
			return "", out.Failed(drivers.ErrToolFailed)
		}
		pkg := strings.TrimSpace(out.Stdout)
		names = append(names, pkg)
		if pkg == name {
			found = append(found, deb)
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%w: no .deb in %s is package %s (it holds %d: %s)", ErrNoSource, b.debDir, name, len(names), strings.Join(names, ", "))
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d .debs in %s are package %s (%s); the driver never chooses a version", len(found), b.debDir, name, strings.Join(found, ", "))
}

// aptInstall installs by name with apt-get.
func (b *Dpkg) aptInstall(ctx context.Context, name string) error {
	var env []string
	args := []string{"-y", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold", "install", name}
	if b.other() {
		conf, err := b.aptConfig()
		if err != nil {
			return err
		}
		defer os.Remove(conf)
		env = append(env, "APT_CONFIG="+conf)
	}
	out, err := drivers.RunTool(ctx, env, "apt-get", args...)
	if err == nil && out.Code == 100 && strings.Contains(out.Message(), "Unable to locate package") && b.refreshed.CompareAndSwap(false, true) {
		// No package lists yet (a fresh machine, a cleaned cache), or old
		// ones: fetch them once, then try again.
		upd, uerr := drivers.RunTool(ctx, env, "apt-get", "update")
		switch {
		case uerr != nil:
			return uerr
		case upd.Code != 0:
			return upd.Failed(drivers.ErrToolFailed)
		}
		out, err = drivers.RunTool(ctx, env, "apt-get", args...)
	}
	if err != nil {
		return err
	}
	if out.Code != 0 {
		return out.Failed(drivers.ErrToolFailed)
	}
	return nil
}

// aptConfig writes an apt configuration that points apt-get at the root
// and dpkg into it. It goes in APT_CONFIG, which apt reads before anything
// else: with Dir set there, apt reads the root's etc/apt and never the
// machine's (whose hooks, debconf among them, would run against the
// machine). "-o Dir=ROOT" on the command line comes too late for that.
func (b *Dpkg) aptConfig() (string, error) {
	root := b.root.Dir()
	d, err := b.root.OpenDir("/etc/apt")
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %s has no apt setup of its own (etc/apt), and no directory of .debs is set", ErrNoSource, root)
	}
	if err != nil {
		return "", err
	}
	d.Close()
	// apt's quoted strings have no escapes.
	if strings.ContainsAny(root, "\"\\\n") {
		return "", fmt.Errorf("%w: root prefix %q cannot be written in an apt configuration", drivers.ErrUnsafePath, root)
	}
	lines := []string{
		`Dir "` + root + `/";`,
		`DPkg::Options:: "--root=` + root + `";`,
		`DPkg::Options:: "--log=` + b.logFile() + `";`,
	}
	if os.Geteuid() != 0 {
		lines = append(lines, `DPkg::Options:: "--force-not-root";`)
	}
	f, err := os.CreateTemp("", "mesh-host-apt-*.conf")
	if err != nil {
		return "", fmt.Errorf("apt configuration for %s: %w", root, err)
	}
	_, err = f.WriteString(strings.Join(lines, "\n") + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("apt configuration for %s: %w", root, err)
	}
	return f.Name(), nil
}
