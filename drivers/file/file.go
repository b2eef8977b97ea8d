// Package file is the driver for regular files: content, mode, owner and
// group, written atomically beneath the root prefix.
//
// A file is written to a temporary name in its own directory and renamed
// over its path, so a reader sees the old content or the new, never a part.
// The driver creates no parent directories (a directory is a resource of
// its own, to be declared), never follows a symlink, and removes only a
// regular file: whatever else it finds at a path it leaves in place.
package file

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sync"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// Errors of the file driver.
var (
	// ErrNoParent is returned by Apply and Stage when the file's directory
	// does not exist (drivers.ErrNoParent).
	ErrNoParent = drivers.ErrNoParent
	// ErrNotRegular is returned when something the host does not replace
	// or remove is at the file's path: a directory or a device for Apply,
	// and anything but a regular file (a symlink too) for Remove.
	ErrNotRegular = errors.New("not a regular file")
)

// DefaultMode is the mode of a file whose spec states none.
const DefaultMode drivers.Mode = 0o644

// Driver manages regular files beneath a root.
type Driver struct {
	root *rootfs.Root
	// sweeps holds, per directory, the one sweep of the temporary files a
	// killed process left there: every stage into the directory waits for
	// it, so it never removes a file staged by this process.
	sweeps sync.Map // dir → *sweep
}

var (
	_ drivers.Driver = (*Driver)(nil)
	_ drivers.Stager = (*Driver)(nil)
	_ drivers.Nested = (*Driver)(nil)
)

// PathOf is the file's path (drivers.Located); empty for a spec that is
// not a file's.
func (d *Driver) PathOf(spec drivers.Spec) string {
	if s, ok := spec.(*drivers.FileSpec); ok {
		return s.Path
	}
	return ""
}

// IsDirectory is false: nothing is declared in a file (drivers.Nested).
func (d *Driver) IsDirectory(drivers.Spec) bool { return false }

// New returns the file driver for root.
func New(root *rootfs.Root) *Driver { return &Driver{root: root} }

// Observe reports how the file at spec's path stands against spec. A
// symlink, directory or anything else that is not a regular file is
// reported as existing with a "type" difference, and never followed.
func (d *Driver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	f, err := d.find(s)
	if err != nil {
		return drivers.Observation{}, err
	}
	if f == nil || f.kind != "file" {
		return observation(s.Path, f, nil), nil
	}
	w, err := d.want(s)
	if err != nil {
		return drivers.Observation{}, err
	}
	return observation(s.Path, f, w.differs(f)), nil
}

// Apply writes the file if its content differs, or sets its mode and
// owner if only they do, and reports Unchanged without writing when it
// matches. A symlink at the path is replaced, not followed. The change is
// durable when Apply returns.
func (d *Driver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	p, err := d.plan(ctx, spec, true)
	if err != nil || p == nil {
		return drivers.Unchanged, err
	}
	return p.Commit()
}

// Stage writes the file's new content under a temporary name beside it
// (or, when only its mode or owner differ, prepares to set them) without
// syncing: the caller syncs the filesystem once between staging and
// committing, and once after. It returns nil when the file matches.
func (d *Driver) Stage(ctx context.Context, spec drivers.Spec) (drivers.Pending, error) {
	p, err := d.plan(ctx, spec, false)
	if err != nil || p == nil {
		return nil, err
	}
	return p, nil
}

// Remove removes the regular file at spec's path. A missing file is not an
// error; anything else at the path (a symlink, a directory) is not what the
// host wrote, so it stays and Remove says what is there.
func (d *Driver) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return err
	}
	f, err := d.find(s)
	if err != nil || f == nil {
		return err
	}
	if f.kind != "file" {
		return fmt.Errorf("remove file %s: %w: a %s is there; the host removes only what it owns, so it is %w", s.Path, ErrNotRegular, f.kind, drivers.ErrLeftInPlace)
	}
	if err := d.root.Remove(s.Path); err != nil {
		return fmt.Errorf("remove file %s: %w", s.Path, err)
	}
	return nil
}

// spec checks the context and the spec every call starts with.
func (d *Driver) spec(ctx context.Context, spec drivers.Spec) (*drivers.FileSpec, error) {
	s, err := drivers.SpecAs[*drivers.FileSpec](ctx, spec, "file")
	if err != nil {
		return nil, err
	}
	if err := drivers.CheckPath(s.Path); err != nil {
		return nil, fmt.Errorf("file %s: %w", s.Path, err)
	}
	if m := drivers.ModeOr(s.Mode, DefaultMode); m > 0o7777 {
		return nil, fmt.Errorf("file %s: %w: mode %o has bits above 07777", s.Path, drivers.ErrInvalidSpec, uint32(m))
	} else if m&0o7000 != 0 && !s.SpecialBits {
		// A setuid root file is a root shell for whoever runs it: only a
		// declaration that says so in words gets one.
		return nil, fmt.Errorf("file %s: %w: mode %04o sets setuid, setgid or sticky; say special_bits: true to mean it", s.Path, drivers.ErrInvalidSpec, uint32(m))
	}
	return s, nil
}

// wanted is a spec resolved against the root: owner names made ids.
type wanted struct {
	path    string
	content []byte
	// digestKey is set for a secret's content: the file's content is then
	// told by a keyed digest, never a plain one.
	digestKey []byte
	rootfs.Attrs
}

func (d *Driver) want(s *drivers.FileSpec) (wanted, error) {
	a, err := d.root.Attrs(s.Mode, DefaultMode, s.Owner, s.Group)
	if err != nil {
		return wanted{}, fmt.Errorf("file %s: %w", s.Path, err)
	}
	w := wanted{path: s.Path, content: []byte(s.Content), Attrs: a}
	if sec := s.Secret; sec != nil {
		value, key, ok := sec.Opened()
		switch {
		case !ok:
			return wanted{}, fmt.Errorf("file %s: %w: secret %q was not opened for this node", s.Path, drivers.ErrInvalidSpec, sec.Name)
		case len(key) == 0:
			return wanted{}, fmt.Errorf("file %s: %w: secret %q has no digest key", s.Path, drivers.ErrInvalidSpec, sec.Name)
		case s.Content != "":
			return wanted{}, fmt.Errorf("file %s: %w: content and a secret both given", s.Path, drivers.ErrInvalidSpec)
		}
		w.content, w.digestKey = value, key
	}
	return w, nil
}

// differs names each respect in which f does not match w.
func (w wanted) differs(f *found) []string {
	var out []string
	if f.digest != digestOf(w.digestKey, w.content) {
		out = append(out, "content")
	}
	return append(out, w.Attrs.Differs(f.mode, f.uid, f.gid)...)
}

// found is what is at a file's path.
type found struct {
	// kind is "file" for a regular file, else what is there instead:
	// "symlink", "directory", "fifo", "socket", "device".
	kind     string
	digest   string
	mode     drivers.Mode
	uid, gid int
	// links is the inode's link count: more than one means another path,
	// perhaps outside the root, names the same file.
	links uint64
}

// find looks at s's path without following a symlink there; nil means
// nothing is there (nor, perhaps, its parent).
// readBuffers are reused across observes: a check reads every owned file.
var readBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (d *Driver) find(s *drivers.FileSpec) (*found, error) {
	// Content, mode and owner from one open file, so they describe one
	// inode even if the path is replaced meanwhile.
	f, st, err := d.root.Look(s.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", s.Path, err)
	}
	if f == nil {
		return &found{kind: rootfs.FileType(uint32(st.Mode))}, nil
	}
	defer f.Close()
	h, prefix := sha256.New(), "sha256:"
	if s.Secret != nil {
		// A file holding a secret is told by a keyed digest: its plain
		// digest, journaled as what drift found, would let anyone with the
		// journal test guesses of the value.
		_, key, _ := s.Secret.Opened()
		h, prefix = hmac.New(sha256.New, key), keyedPrefix
	}
	buf := readBuffers.Get().(*[]byte)
	defer readBuffers.Put(buf)
	// Hide *os.File's WriteTo, which would allocate a buffer per file.
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, *buf); err != nil {
		return nil, fmt.Errorf("file %s: read: %w", s.Path, err)
	}
	return &found{
		kind:   "file",
		digest: prefix + hex.EncodeToString(h.Sum(nil)),
		mode:   drivers.Mode(st.Mode & 0o7777),
		uid:    int(st.Uid),
		gid:    int(st.Gid),
		links:  uint64(st.Nlink),
	}, nil
}

// notReplaced is Apply's refusal of the kind of thing at path, which the
// host does not replace with a file.
func notReplaced(path, kind string) error {
	return fmt.Errorf("file %s: %w: a %s is there; the host does not replace it", path, ErrNotRegular, kind)
}

// observation reports f (nil: absent) at path, with differs when it is a
// regular file.
func observation(path string, f *found, differs []string) drivers.Observation {
	switch {
	case f == nil:
		return drivers.Observation{Differs: []string{"absent"}}
	case f.kind == "symlink":
		// Apply renames over the link, never touching its target.
		return drivers.Observation{Exists: true, Differs: []string{"type"}, Seen: "type:" + f.kind}
	case f.kind != "file":
		return drivers.Observation{Exists: true, Differs: []string{"type"}, Seen: "type:" + f.kind, Refused: notReplaced(path, f.kind)}
	}
	return drivers.Observation{Exists: true, InSync: len(differs) == 0, Differs: differs, Seen: f.digest}
}

// keyedPrefix starts the keyed digest of a secret file's content.
const keyedPrefix = "hmac-sha256:"

// digestOf is the digest find reports for content: keyed when key is set.
func digestOf(key, content []byte) string {
	if key != nil {
		m := hmac.New(sha256.New, key)
		m.Write(content)
		return keyedPrefix + hex.EncodeToString(m.Sum(nil))
	}
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// plan prepares what Apply does: nil when the file matches; a staged
// write when its content differs or something replaceable is there; a
// chown when only its mode or owner differ. durable makes the change
// durable by the time it is committed.
func (d *Driver) plan(ctx context.Context, spec drivers.Spec, durable bool) (*pending, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return nil, err
	}
	w, err := d.want(s)
	if err != nil {
		return nil, err
	}
	f, err := d.find(s)
	if err != nil {
		return nil, err
	}
	action := drivers.Updated
	switch {
	case f == nil:
		action = drivers.Created
	case f.kind == "symlink":
		// Renaming over the link replaces the link itself; its target,
		// which may be anywhere, is never touched.
	case f.kind != "file":
		return nil, notReplaced(s.Path, f.kind)
	default:
		differs := w.differs(f)
		if len(differs) == 0 {
			return nil, nil
		}
		// Only the mode or owner differ: set them in place, unless
		// another link names the inode. A chmod or chown through this
		// path would change that other file too (a hard link from
		// outside the root to /etc/shadow, say), so the path gets a new
		// inode of its own instead, and the other link is left as it was.
		if !slices.Contains(differs, "content") && f.links <= 1 {
			return &pending{d: d, w: w, action: action, durable: durable}, nil
		}
	}
	if err := d.sweep(path.Dir(s.Path)); err != nil {
		return nil, fmt.Errorf("file %s: %w", s.Path, err)
	}
	staged, err := d.root.StageFile(s.Path, w.content, rootfs.WriteOptions{Mode: w.Mode, UID: w.UID, GID: w.GID, Sync: durable})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", drivers.NoParent(drivers.KindFile, s.Path), err)
	}
	if err != nil {
		return nil, fmt.Errorf("file %s: %w", s.Path, err)
	}
	return &pending{d: d, w: w, action: action, staged: staged}, nil
}

// pending is a staged change to one file: a written temporary file to
// rename into place, or (staged nil) a mode and owner to set.
type pending struct {
	d      *Driver
	w      wanted
	action drivers.Action
	staged *rootfs.Staged
	// durable makes a chown durable; a staged write knows for itself.
	durable bool

	once sync.Once
}

var _ drivers.Pending = (*pending)(nil)

// Commit renames the staged file over the path, or sets the mode and
// owner. A second Commit, or a Commit after Abort, does nothing.
func (p *pending) Commit() (drivers.Action, error) {
	action, err := drivers.Unchanged, error(nil)
	p.once.Do(func() {
		action, err = p.commit()
	})
	return action, err
}

func (p *pending) commit() (drivers.Action, error) {
	if p.staged != nil {
		if err := p.staged.Commit(); err != nil {
			return drivers.Unchanged, fmt.Errorf("file %s: %w", p.w.path, err)
		}
		return p.action, nil
	}
	root := p.d.root
	if err := root.Chown(p.w.path, p.w.Mode, p.w.UID, p.w.GID); err != nil {
		return drivers.Unchanged, fmt.Errorf("file %s: set mode and owner: %w", p.w.path, err)
	}
	if p.durable {
		if err := syncFile(root, p.w.path); err != nil {
			return drivers.Unchanged, err
		}
	}
	return p.action, nil
}

var _ drivers.Flusher = (*pending)(nil)

// FlushStaged makes the staged content durable; a change of mode or owner
// alone has nothing staged.
func (p *pending) FlushStaged() error {
	if p.staged == nil {
		return nil
	}
	if err := p.staged.Flush(); err != nil {
		return fmt.Errorf("file %s: %w", p.w.path, err)
	}
	return nil
}

// FlushCommitted makes the rename durable, or the change of mode and owner.
func (p *pending) FlushCommitted() error {
	if p.staged == nil {
		return syncFile(p.d.root, p.w.path)
	}
	if err := p.staged.FlushRename(); err != nil {
		return fmt.Errorf("file %s: %w", p.w.path, err)
	}
	return nil
}

// Abort removes the staged file; after Commit it does nothing.
func (p *pending) Abort() {
	p.once.Do(func() {
		if p.staged != nil {
			p.staged.Abort()
		}
	})
}

// syncFile makes a change to p's inode (its mode, its owner) durable.
func syncFile(root *rootfs.Root, p string) error {
	f, err := root.OpenFile(p)
	if err != nil {
		return fmt.Errorf("file %s: sync: %w", p, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("file %s: sync: %w", p, err)
	}
	return nil
}

type sweep struct {
	once sync.Once
	err  error
}

// sweep clears dir of leftover temporary files, once per process; callers
// for the same directory wait until it is done.
func (d *Driver) sweep(dir string) error {
	v, _ := d.sweeps.LoadOrStore(dir, new(sweep))
	sw := v.(*sweep)
	sw.once.Do(func() { sw.err = d.root.SweepStaged(dir) })
	return sw.err
}
