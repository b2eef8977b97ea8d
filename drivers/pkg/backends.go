package pkg

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Detect picks the backend for root by what the machine has: the first of
// dpkg, pacman, apk and rpm whose tool is on PATH and whose database the
// root holds, else the first whose tool is on PATH (a root not yet
// populated). When none is on PATH, every call of the backend it returns
// fails with drivers.ErrToolMissing naming the tools looked for.
func Detect(root *rootfs.Root) Backend {
	candidates := []struct {
		tool    string
		dbs     []string
		backend Backend
	}{
		{"dpkg-query", []string{"/var/lib/dpkg/status"}, NewDpkg(root, "")},
		{"pacman", []string{"/var/lib/pacman/local"}, NewPacman(root)},
		{"apk", []string{"/lib/apk/db/installed"}, NewApk(root)},
		{"rpm", []string{"/var/lib/rpm", "/usr/lib/sysimage/rpm"}, NewRPM(root)},
	}
	var fallback Backend
	var tools []string
	for _, c := range candidates {
		tools = append(tools, c.tool)
		if _, err := exec.LookPath(c.tool); err != nil {
			continue
		}
		for _, db := range c.dbs {
			if _, err := root.Lstat(db); err == nil {
				return c.backend
			}
		}
		if fallback == nil {
			fallback = c.backend
		}
	}
	if fallback != nil {
		return fallback
	}
	return missing{tools: tools}
}

// missing is the backend of a machine with no package manager Detect knows.
type missing struct{ tools []string }

func (m missing) err() error {
	return fmt.Errorf("%w: no package manager: none of %s is on PATH", drivers.ErrToolMissing, strings.Join(m.tools, ", "))
}

func (m missing) Installed(context.Context, string) (bool, error) { return false, m.err() }
func (m missing) Install(context.Context, string) error           { return m.err() }
func (m missing) Remove(context.Context, string) error            { return m.err() }

// Pacman is the Arch Linux backend: pacman -Q, -S --noconfirm --needed and
// -R --noconfirm. In a root other than "/" it runs with --root and with
// --dbpath in the root, so that the database is the root's even where the
// machine's pacman.conf names another; repositories come from the
// machine's pacman.conf, as pacstrap uses them.
type Pacman struct{ root *rootfs.Root }

var _ Backend = (*Pacman)(nil)

// NewPacman returns the pacman backend for root.
func NewPacman(root *rootfs.Root) *Pacman { return &Pacman{root: root} }

func (b *Pacman) args(args ...string) []string {
	if dir := b.root.Dir(); dir != "/" {
		return append([]string{"--root", dir, "--dbpath", filepath.Join(dir, "var/lib/pacman")}, args...)
	}
	return args
}

// Installed runs pacman -Q: exit code 1 with "was not found" is not
// installed.
func (b *Pacman) Installed(ctx context.Context, name string) (bool, error) {
	out, err := drivers.RunTool(ctx, nil, "pacman", b.args("-Q", name)...)
	return installed(out, err, out.Code == 1 && strings.Contains(out.Stderr, "was not found"))
}

// Install runs pacman -S --noconfirm --needed.
func (b *Pacman) Install(ctx context.Context, name string) error {
	return succeeded(drivers.RunTool(ctx, nil, "pacman", b.args("-S", "--noconfirm", "--needed", name)...))
}

// Remove runs pacman -R --noconfirm.
func (b *Pacman) Remove(ctx context.Context, name string) error {
	return succeeded(drivers.RunTool(ctx, nil, "pacman", b.args("-R", "--noconfirm", name)...))
}

// Apk is the Alpine backend: apk info -e, apk add and apk del, with --root
// in a root other than "/" (apk then reads the root's repositories and
// keys).
type Apk struct{ root *rootfs.Root }

var _ Backend = (*Apk)(nil)

// NewApk returns the apk backend for root.
func NewApk(root *rootfs.Root) *Apk { return &Apk{root: root} }

func (b *Apk) args(args ...string) []string {
	if dir := b.root.Dir(); dir != "/" {
		return append([]string{"--root", dir}, args...)
	}
	return args
}

// Installed runs apk info -e: a non-zero exit with nothing said is not
// installed.
func (b *Apk) Installed(ctx context.Context, name string) (bool, error) {
	out, err := drivers.RunTool(ctx, nil, "apk", b.args("info", "-e", name)...)
	return installed(out, err, out.Code == 1 && strings.TrimSpace(out.Stderr) == "")
}

// Install runs apk add.
func (b *Apk) Install(ctx context.Context, name string) error {
	return succeeded(drivers.RunTool(ctx, nil, "apk", b.args("add", name)...))
}

// Remove runs apk del.
func (b *Apk) Remove(ctx context.Context, name string) error {
	return succeeded(drivers.RunTool(ctx, nil, "apk", b.args("del", name)...))
}

// RPM is the backend for rpm-based systems: rpm -q asks, dnf installs and
// removes, with --root and --installroot in a root other than "/".
type RPM struct{ root *rootfs.Root }

var _ Backend = (*RPM)(nil)

// NewRPM returns the rpm and dnf backend for root.
func NewRPM(root *rootfs.Root) *RPM { return &RPM{root: root} }

// Installed runs rpm -q: exit code 1 with "is not installed" is not
// installed.
func (b *RPM) Installed(ctx context.Context, name string) (bool, error) {
	args := []string{"-q", name}
	if dir := b.root.Dir(); dir != "/" {
		args = append([]string{"--root", dir}, args...)
	}
	out, err := drivers.RunTool(ctx, nil, "rpm", args...)
	return installed(out, err, out.Code == 1 && strings.Contains(out.Stdout+out.Stderr, "is not installed"))
}

// Install runs dnf install -y.
func (b *RPM) Install(ctx context.Context, name string) error {
	return succeeded(drivers.RunTool(ctx, nil, "dnf", b.dnfArgs("install", name)...))
}

// Remove runs dnf remove -y.
func (b *RPM) Remove(ctx context.Context, name string) error {
	return succeeded(drivers.RunTool(ctx, nil, "dnf", b.dnfArgs("remove", name)...))
}

func (b *RPM) dnfArgs(op, name string) []string {
	args := []string{op, "-y"}
	if dir := b.root.Dir(); dir != "/" {
		args = append(args, "--installroot="+dir)
	}
	return append(args, name)
}

// installed judges a query: exit code 0 is installed, notInstalled says the
// tool answered "not installed", anything else is the tool failing.
func installed(out drivers.ToolOutput, err error, notInstalled bool) (bool, error) {
	switch {
	case err != nil:
		return false, err
	case out.Code == 0:
		return true, nil
	case notInstalled:
		return false, nil
	}
	return false, out.Failed(drivers.ErrToolFailed)
}

// succeeded judges a command: anything but exit code 0 is the tool failing.
func succeeded(out drivers.ToolOutput, err error) error {
	if err != nil {
		return err
	}
	if out.Code != 0 {
		return out.Failed(drivers.ErrToolFailed)
	}
	return nil
}
