// Package directory is the driver for directories: mode, owner and group
// beneath the root prefix.
//
// The driver creates a directory whose parent exists (parents are
// resources of their own, to be declared), never follows a symlink, and
// removes only an empty directory: what is in a directory that the host
// does not own stays, and so does the directory.
package directory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the directory driver.
var (
	// ErrNotEmpty is returned by Remove when the directory holds entries
	// the host does not own; the directory is left in place. The error
	// also wraps unix.ENOTEMPTY.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrNoParent is returned by Apply when the directory's parent does
	// not exist (drivers.ErrNoParent).
	ErrNoParent = drivers.ErrNoParent
	// ErrNotDirectory is returned by Apply and Remove when something other
	// than a directory (a file, a symlink) is at the path; the host neither
	// replaces nor removes it.
	ErrNotDirectory = errors.New("not a directory")
)

// DefaultMode is the mode of a directory whose spec states none.
const DefaultMode drivers.Mode = 0o755

// Driver manages directories beneath a root.
type Driver struct {
	root *rootfs.Root
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Leaver = (*Driver)(nil)
	_ drivers.Nested = (*Driver)(nil)
)

// PathOf is the directory's path (drivers.Located); empty for a spec
// that is not a directory's.
func (d *Driver) PathOf(spec drivers.Spec) string {
	if s, ok := spec.(*drivers.DirectorySpec); ok {
		return s.Path
	}
	return ""
}

// IsDirectory is true: others are declared in it (drivers.Nested).
func (d *Driver) IsDirectory(drivers.Spec) bool { return true }

// New returns the directory driver for root.
func New(root *rootfs.Root) *Driver { return &Driver{root: root} }

// notReplaced is Apply's refusal of the kind of thing at path, which the
// host does not replace with a directory.
func notReplaced(path, kind string) error {
	return fmt.Errorf("directory %s: %w: a %s is there; the host does not replace it", path, ErrNotDirectory, kind)
}

// Observe reports how the directory at spec's path stands against spec;
// anything else there, a symlink included, is a "type" difference.
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	f, err := d.find(s)
	if err != nil {
		return drivers.Observation{}, err
	}
	switch {
	case f == nil:
		return drivers.Observation{Differs: []string{"absent"}}, nil
	case f.kind != "directory":
		return drivers.Observation{Exists: true, Differs: []string{"type"}, Seen: "type:" + f.kind, Refused: notReplaced(s.Path, f.kind)}, nil
	}
	w, err := d.want(s)
	if err != nil {
		return drivers.Observation{}, err
	}
	differs := w.differs(f)
	return drivers.Observation{
		Exists:  true,
		InSync:  len(differs) == 0,
		Differs: differs,
		Seen:    fmt.Sprintf("dir:%s:%d:%d", f.mode, f.uid, f.gid),
	}, nil
}

// Apply creates the directory, or sets its mode and owner, and reports
// Unchanged when it matches. Its parent must exist. The change is durable
// when Apply returns.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	w, err := d.want(s)
	if err != nil {
		return drivers.Unchanged, err
	}
	f, err := d.find(s)
	if err != nil {
		return drivers.Unchanged, err
	}
	switch {
	case f == nil:
		created, err := d.root.Mkdir(s.Path, w.Mode, w.UID, w.GID)
		if errors.Is(err, fs.ErrNotExist) {
			return drivers.Unchanged, fmt.Errorf("%w: %w", drivers.NoParent(drivers.KindDirectory, s.Path), err)
		}
		if err != nil {
			return drivers.Unchanged, fmt.Errorf("directory %s: %w", s.Path, err)
		}
		if !created {
			// Made by someone else since find: bring it to the spec.
			return d.chown(w)
		}
		return drivers.Created, d.sync(path.Dir(s.Path))
	case f.kind != "directory":
		return drivers.Unchanged, notReplaced(s.Path, f.kind)
	case len(w.differs(f)) == 0:
		return drivers.Unchanged, nil
	}
	return d.chown(w)
}

// chown sets the directory's mode and owner.
func (d *Driver) chown(w wanted) (drivers.Action, error) {
	if err := d.root.Chown(w.path, w.Mode, w.UID, w.GID); err != nil {
		return drivers.Unchanged, fmt.Errorf("directory %s: set mode and owner: %w", w.path, err)
	}
	return drivers.Updated, d.sync(w.path)
}

// sync makes a change within the directory p, or to p itself, durable.
func (d *Driver) sync(p string) error {
	dir, err := d.root.OpenDir(p)
	if err != nil {
		return fmt.Errorf("directory %s: sync: %w", p, err)
	}
	defer dir.Close()
	if err := dir.Sync(); err != nil {
		return fmt.Errorf("directory %s: sync: %w", p, err)
	}
	return nil
}

// Remove removes the directory at spec's path if it is empty. A missing
// directory is not an error. A directory holding anything (which the host
// does not own: the reconciler removes what it owns first) stays, and so
// does anything other than a directory at the path; Remove says which.
func (d *Driver) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return err
	}
	f, err := d.find(s)
	if err != nil || f == nil {
		return err
	}
	if f.kind != "directory" {
		return fmt.Errorf("remove directory %s: %w: a %s is there; the host removes only what it owns, so it is %w", s.Path, ErrNotDirectory, f.kind, drivers.ErrLeftInPlace)
	}
	err = d.root.Remove(s.Path)
	if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("remove directory %s: %w: it holds entries the host does not own, so it is %w: %w", s.Path, ErrNotEmpty, drivers.ErrLeftInPlace, err)
	}
	if err != nil {
		return fmt.Errorf("remove directory %s: %w", s.Path, err)
	}
	return nil
}

// WouldLeave says why Remove would leave the directory at spec's path in
// place once the paths gone reports are removed: something other than a
// directory is there, or it holds an entry that is not gone. Empty when
// Remove would remove it, or find nothing there.
func (d *Driver) WouldLeave(ctx context.Context, spec drivers.Spec, gone func(string) bool) (string, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return "", err
	}
	f, err := d.find(s)
	if err != nil || f == nil {
		return "", err
	}
	if f.kind != "directory" {
		return fmt.Sprintf("a %s is there; the host removes only what it owns", f.kind), nil
	}
	dir, err := d.root.OpenDir(s.Path)
	if err != nil {
		return "", err
	}
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(256)
		for _, name := range names {
			if entry := path.Join(s.Path, name); !gone(entry) {
				return fmt.Sprintf("it holds %s, which this reconcile does not remove", entry), nil
			}
		}
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("directory %s: %w", s.Path, err)
		}
	}
}

// spec checks the context and the spec every call starts with.
func (d *Driver) spec(ctx context.Context, spec drivers.Spec) (*drivers.DirectorySpec, error) {
	s, err := drivers.SpecAs[*drivers.DirectorySpec](ctx, spec, "directory")
	if err != nil {
		return nil, err
	}
	if err := drivers.CheckPath(s.Path); err != nil {
		return nil, fmt.Errorf("directory %s: %w", s.Path, err)
	}
	if m := drivers.ModeOr(s.Mode, DefaultMode); m > 0o7777 {
		return nil, fmt.Errorf("directory %s: %w: mode %o has bits above 07777", s.Path, drivers.ErrInvalidSpec, uint32(m))
	} else if m&0o7000 != 0 && !s.SpecialBits {
		// As a file's: a setgid directory hands its group to all that is
		// made in it, a sticky one changes who may delete there.
		return nil, fmt.Errorf("directory %s: %w: mode %04o sets setuid, setgid or sticky; say special_bits: true to mean it", s.Path, drivers.ErrInvalidSpec, uint32(m))
	}
	return s, nil
}

// wanted is a spec resolved against the root: owner names made ids.
type wanted struct {
	path string
	rootfs.Attrs
}

func (d *Driver) want(s *drivers.DirectorySpec) (wanted, error) {
	a, err := d.root.Attrs(s.Mode, DefaultMode, s.Owner, s.Group)
	if err != nil {
		return wanted{}, fmt.Errorf("directory %s: %w", s.Path, err)
	}
	return wanted{path: s.Path, Attrs: a}, nil
}

// differs names each respect in which f does not match w.
func (w wanted) differs(f *found) []string { return w.Attrs.Differs(f.mode, f.uid, f.gid) }

// found is what is at a directory's path.
type found struct {
	// kind is "directory", else what is there instead: "file",
	// "symlink", "fifo", "socket", "device".
	kind     string
	mode     drivers.Mode
	uid, gid int
}

// find looks at s's path without following a symlink there; nil means
// nothing is there (nor, perhaps, its parent).
func (d *Driver) find(s *drivers.DirectorySpec) (*found, error) {
	st, err := d.root.Lstat(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("directory %s: %w", s.Path, err)
	}
	return &found{
		kind: rootfs.FileType(uint32(st.Mode)),
		mode: drivers.Mode(st.Mode & 0o7777),
		uid:  int(st.Uid),
		gid:  int(st.Gid),
	}, nil
}
