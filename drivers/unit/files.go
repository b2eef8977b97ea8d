package unit

import (
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
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// This file is the unit's side that lives in files: the unit file, where
// systemd would find it, masks, and enablement through systemctl --root.

// searchPath is where systemd looks for a system unit's file, beneath the
// root, first to last (systemd.unit(5), "Unit File Load Path").
// /lib/systemd/system counts on a root whose /lib is a directory; where
// /lib is a link to usr/lib, /usr/lib/systemd/system is the same place.
var searchPath = []string{
	"/etc/systemd/system.control",
	"/run/systemd/system.control",
	"/run/systemd/transient",
	"/run/systemd/generator.early",
	Dir,
	"/etc/systemd/system.attached",
	"/run/systemd/system",
	"/run/systemd/system.attached",
	"/run/systemd/generator",
	"/usr/local/lib/systemd/system",
	"/usr/lib/systemd/system",
	"/lib/systemd/system",
	"/run/systemd/generator.late",
}

// view is a unit as the driver found it.
type view struct {
	// kind is what is at the unit's file: "file" for a regular file,
	// else "symlink", "directory", "fifo", "socket", "device"; "" when
	// nothing is there. For a unit declared with content, the file is
	// the host's, in Dir; for one without, the first on the search path
	// (or the manager's, "loaded").
	kind string
	// where is the unit file's path beneath the root.
	where string
	// content is the file's content when it is a regular file.
	content []byte
	// mask says what masks the unit, "" when nothing does.
	mask string
	// enabled is what systemctl --root is-enabled says.
	enabled string
	// rt is the unit's state in the manager; nil where none runs, and
	// for a template, which the manager never loads.
	rt *props
}

func (v *view) exists() bool { return v.kind != "" }

// look finds the unit of s: its file and mask, its enablement, and, when
// a manager runs, its state there. It changes nothing.
func (d *Driver) look(ctx context.Context, s *drivers.UnitSpec, managed bool) (*view, error) {
	v := &view{}
	if s.Content != "" {
		v.where = d.path(s)
		kind, err := d.kindAt(s.Name, v.where)
		if err != nil {
			return nil, err
		}
		v.kind = kind
	} else {
		if err := d.search(s.Name, v); err != nil {
			return nil, err
		}
	}
	// An empty file masks a unit, but at the host's own path it is only
	// content to rewrite, never a mask someone set.
	own := s.Content != ""
	if err := d.inspect(s.Name, v, !own); err != nil {
		return nil, err
	}
	// The manager is asked of a unit whose file is there, and of one
	// declared without content that it may have found where the search
	// path does not reach; not of a file the host has yet to write.
	if managed && !isTemplate(s.Name) && (v.exists() || !own) {
		rt, err := d.props(ctx, s.Name)
		if err != nil {
			return nil, err
		}
		v.rt = rt
		if !own && !v.exists() && rt.LoadState != "not-found" && rt.LoadState != "" {
			// The manager loaded it from where the search path does not
			// reach (a generator's output, say): it is installed.
			v.kind, v.where = "loaded", rt.FragmentPath
		}
		if rt.LoadState == "masked" && v.mask == "" {
			v.mask = "the service manager has it masked"
		}
	}
	// Where a unit declared with content has something else than a
	// regular file at its path, it differs in "type" alone: Apply
	// replaces a symlink there and refuses anything else, and systemctl
	// would read through it.
	if v.kind == "" || (own && v.kind != "file") {
		return v, nil
	}
	state, err := d.state(ctx, "--root="+d.root.Dir(), "is-enabled", "--", s.Name)
	if err != nil {
		return nil, fmt.Errorf("unit %s: %w", s.Name, err)
	}
	v.enabled = state
	if (state == "masked-runtime" || state == "masked" && !own) && v.mask == "" {
		v.mask = "systemctl is-enabled says " + state
	}
	return v, nil
}

// search finds where systemd would load the unit name from: the first
// file of that name on the search path, else, for an instance, the first
// of its template's.
func (d *Driver) search(name string, v *view) error {
	names := []string{name}
	if template, instance := nameParts(name); instance != "" {
		names = append(names, template)
	}
	for _, n := range names {
		for _, dir := range searchPath {
			p := path.Join(dir, n)
			kind, err := d.kindAt(name, p)
			if errors.Is(err, drivers.ErrUnsafePath) {
				continue // a symlink on the way: /lib -> usr/lib is searched as /usr/lib
			}
			if err != nil {
				return err
			}
			if kind != "" {
				v.kind, v.where = kind, p
				return nil
			}
		}
	}
	return nil
}

// kindAt is what is at p, without following a symlink there: "" when
// nothing is.
func (d *Driver) kindAt(name, p string) (string, error) {
	st, err := d.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("unit %s: %w", name, err)
	}
	return rootfs.FileType(uint32(st.Mode)), nil
}

// inspect reads the unit file v found: its content, or where the symlink
// there points; either may mask the unit (a link to /dev/null, and, when
// emptyMasks, an empty file: what systemd takes for a mask).
func (d *Driver) inspect(name string, v *view, emptyMasks bool) error {
	switch v.kind {
	case "file":
		content, err := d.root.ReadFile(v.where)
		if errors.Is(err, fs.ErrNotExist) {
			v.kind = ""
			return nil
		}
		if err != nil {
			return fmt.Errorf("unit %s: %w", name, err)
		}
		v.content = content
		if len(content) == 0 && emptyMasks {
			v.mask = "an empty file at " + v.where
		}
	case "symlink":
		dir, err := d.root.OpenDir(path.Dir(v.where))
		if err != nil {
			return fmt.Errorf("unit %s: %w", name, err)
		}
		defer dir.Close()
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(int(dir.Fd()), path.Base(v.where), buf)
		if errors.Is(err, unix.ENOENT) {
			v.kind = ""
			return nil
		}
		if err != nil {
			return fmt.Errorf("unit %s: read the link %s: %w", name, d.root.Host(v.where), err)
		}
		if string(buf[:n]) == "/dev/null" {
			v.mask = "a symlink to /dev/null at " + v.where
		}
	}
	return nil
}

// differs names each respect in which v does not match s; activity only
// when a manager runs.
func (v *view) differs(s *drivers.UnitSpec, managed bool) []string {
	if s.Content != "" && v.kind != "file" {
		return []string{"type"}
	}
	var out []string
	if s.Content != "" && string(v.content) != s.Content {
		out = append(out, "content")
	}
	if v.mask != "" && (s.Enabled || s.Active) {
		// Neither enablement nor activity can follow the spec while the
		// mask stays; the mask is the difference to lift.
		return append(out, "masked")
	}
	if enabled(v.enabled) != s.Enabled {
		out = append(out, "enabled")
	}
	if managed && v.rt != nil && v.rt.active() != s.Active {
		out = append(out, "active")
	}
	return out
}

// seen is the file's digest (or what is there instead; and, for a unit
// declared without content, where it is) and the states found:
// enablement, and activity where a manager runs.
func (v *view) seen(s *drivers.UnitSpec) string {
	var seen string
	switch {
	case s.Content != "" && v.kind != "file":
		return "type:" + v.kind
	case s.Content == "":
		// Someone else's file: where it is says as much as what it holds.
		seen = v.kind + ":" + v.where + " "
	}
	if v.kind == "file" {
		sum := sha256.Sum256(v.content)
		seen += "sha256:" + hex.EncodeToString(sum[:])
	}
	seen = strings.TrimSuffix(seen, " ")
	if v.enabled != "" {
		seen += " " + v.enabled
	}
	if v.rt != nil {
		seen += " " + v.rt.ActiveState
	}
	return seen
}

// enabled is whether an is-enabled state is enabled; static, indirect,
// disabled, masked and the rest are not.
func enabled(state string) bool { return state == "enabled" || state == "enabled-runtime" }

// state runs a systemctl query (is-enabled), which says the state on
// stdout and exits non-zero for most of them.
func (d *Driver) state(ctx context.Context, args ...string) (string, error) {
	out, err := drivers.RunTool(ctx, nil, "systemctl", args...)
	if err != nil {
		return "", err
	}
	state, _, _ := strings.Cut(strings.TrimSpace(out.Stdout), "\n")
	if state == "" {
		return "", out.Failed(drivers.ErrToolFailed)
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
		return out.Failed(drivers.ErrToolFailed)
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
		return fmt.Errorf("unit %s: %w", s.Name, out.Failed(drivers.ErrToolFailed))
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
// sandbox). Only a spec with content is ever written: an empty unit file
// would mask the unit.
func (d *Driver) write(s *drivers.UnitSpec) error {
	if s.Content == "" {
		return fmt.Errorf("unit %s: %w: no content to write", s.Name, drivers.ErrInvalidSpec)
	}
	uid, gid := os.Geteuid(), os.Getegid()
	for _, dir := range []string{"/etc", "/etc/systemd", Dir} {
		if _, err := d.root.Mkdir(dir, 0o755, uid, gid); err != nil {
			return fmt.Errorf("unit %s: %w", s.Name, err)
		}
	}
	err := d.root.WriteFile(d.path(s), []byte(s.Content), rootfs.WriteOptions{Mode: 0o644, UID: uid, GID: gid, Sync: true})
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
		return fmt.Errorf("unit %s: %w: systemd-analyze rejects it: %w", s.Name, drivers.ErrInvalidSpec, out.Failed(drivers.ErrToolFailed))
	}
	return nil
}
