// Package rootfs is the confined filesystem every driver works under: a
// root prefix ("/" on a node, a directory in tests and demos) in which a
// path is resolved beneath the root without following a symlink it did
// not expect (openat2, or a walk with O_NOFOLLOW), and files are written
// staged and then committed (unnamed O_TMPFILE files or temporary names,
// linked or renamed into place), made durable one file at a time or with
// one syncfs for a batch. It also reads the root's own account files
// (passwd and group lookups) and says whether a service manager runs the
// root.
//
// It is not the drivers' vocabulary: the specs, Mode, CheckPath and the
// errors it wraps (drivers.ErrUnsafePath, drivers.ErrInvalidSpec) live in
// package drivers, which it imports and which never imports it, so that
// what only names a spec (declarations, profiles, the control plane) does
// not link the system calls here. Nor does it decide anything about a
// resource: what to write, and whether a change is owed, is each driver's.
package rootfs

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
)

// Root is the root prefix the drivers manage: "/" on a node, a sandbox in
// tests and demos. Every path is resolved beneath it one component at a
// time with O_NOFOLLOW, so a symlink planted at a path or in any parent is
// refused (drivers.ErrUnsafePath), never followed, and nothing is read or
// written outside it. Paths handed to Root are absolute and clean, as
// declarations state them ("/etc/motd"), and mean that path under the
// root.
type Root struct {
	dir string
	// fd is the root directory, held open so that resolving a path costs
	// one openat2 (or one openat a component), not a walk from "/" too.
	fd int
	// held are the directories staged files hold open until they are
	// committed or aborted, by path: one descriptor a directory, shared
	// by every file staged there (see maxHeldDirs).
	heldMu sync.Mutex
	held   map[string]*heldDir
	// heldOpen counts the held descriptors still open: those in held, and
	// those replaced there (shareHeldFor) that staged files still hold.
	heldOpen int
	// unnamed counts the staged files held open without a name
	// (O_TMPFILE) until their commit; noUnnamed is set once linking one
	// into place failed for want of a privilege, and every later file is
	// staged under a temporary name.
	unnamed    int
	noUnnamed  bool
	maxUnnamed int // MaxUnnamed, or fewer under a low RLIMIT_NOFILE
	// shareHeldFor bounds how long after its opening a held directory is
	// shared with files staged later (see defaultShareHeldFor).
	shareHeldFor time.Duration
}

// heldDir is a directory's descriptor shared by the files staged in it,
// closed when the last of them is committed or aborted.
type heldDir struct {
	f      *os.File
	refs   int
	opened time.Time
}

// defaultShareHeldFor bounds how long after its opening a held directory
// is shared with files staged later. A batch stages its files within
// seconds; a file staged after that, in a batch of its own, has its
// directory opened and checked again, so a staged file never committed
// nor aborted (a bug) cannot have later batches write into a directory
// that was moved away long since.
const defaultShareHeldFor = 10 * time.Second

// maxHeldDirs bounds the directory descriptors staged files hold between
// Stage and Commit. Past it a file staged in yet another directory lets
// its directory go and opens it again, checked again, to commit: a batch
// of 100,000 files in as many directories cannot run the process out of
// descriptors. Files staged in a directory already held share its
// descriptor, so a batch's files in one directory open it once, not once
// to stage and once again to commit each.
const maxHeldDirs = 256

// MaxUnnamed bounds the staged files held open without a name between
// Stage and Commit. A file staged unnamed (O_TMPFILE) is made in its
// directory without a directory entry, and its commit links it in: one
// operation on the directory where a temporary name costs three (the name
// made, then renamed: removed and made again), which in a directory of
// 100,000 files is most of the kernel's part of a first apply, and the
// directory's lock is not taken to stage it. A crash leaves no temporary
// file behind. But the file is held by its descriptor until the commit: past
// MaxUnnamed files staged, the next is staged under a temporary name, as on
// a filesystem without O_TMPFILE. A caller staging more commits in batches
// of at most Root.StageBatch to keep every file unnamed.
const MaxUnnamed = 2048

// Open returns the Root at dir, which must be an existing directory.
func Open(dir string) (*Root, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("root prefix: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("root prefix %s is not a directory", abs)
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root prefix %s: %w", abs, err)
	}
	return &Root{dir: abs, fd: fd, maxUnnamed: maxUnnamedFor(), shareHeldFor: defaultShareHeldFor}, nil
}

// maxUnnamedFor is how many files may be staged unnamed at once: at most
// MaxUnnamed, and a quarter of the descriptors the process may open, so
// that a unit run with a low limit stages the rest named rather than run
// out.
func maxUnnamedFor() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return int(min(uint64(MaxUnnamed), lim.Cur/4))
}

// StageBatch is how many files a caller stages before committing them so
// that each is staged unnamed (see MaxUnnamed); at least 1.
func (r *Root) StageBatch() int { return max(r.maxUnnamed, 1) }

// Close releases the root directory.
func (r *Root) Close() error { return unix.Close(r.fd) }

// Dir is the root prefix's directory on this machine.
func (r *Root) Dir() string { return r.dir }

// Host returns where p lives on this machine: for messages and for tools
// that take a whole path (dpkg --root, systemctl --root take Dir instead).
func (r *Root) Host(p string) string { return filepath.Join(r.dir, p) }

// OpenDir opens the directory p beneath the root without following any
// symlink. p "/" is the root itself. The caller closes the file.
func (r *Root) OpenDir(p string) (*os.File, error) {
	if p == "/" {
		fd, err := unix.Dup(r.fd)
		if err != nil {
			return nil, fmt.Errorf("open root %s: %w", r.dir, err)
		}
		unix.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), r.dir), nil
	}
	if err := drivers.CheckPath(p); err != nil {
		return nil, err
	}
	fd, err := openBeneath(r.fd, p[1:], unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, errNoOpenat2) {
		fd, err = r.walk(p)
	}
	if err != nil {
		return nil, r.pathErr("open directory", p, err)
	}
	return os.NewFile(uintptr(fd), r.Host(p)), nil
}

// walk opens the directory p one component at a time with O_NOFOLLOW: the
// portable way to what openat2's RESOLVE_NO_SYMLINKS does in one call.
func (r *Root) walk(p string) (int, error) {
	fd := r.fd
	for _, c := range strings.Split(p[1:], "/") {
		next, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != r.fd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// pathErr turns ELOOP/ENOTDIR from an O_NOFOLLOW walk into
// drivers.ErrUnsafePath: something on the way is a symlink (or not a
// directory) where the host expects a directory.
func (r *Root) pathErr(op, p string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%s %s: %w: a symlink is in the way; the host never follows one", op, p, drivers.ErrUnsafePath)
	case errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("%s %s: %w: a parent is not a directory", op, p, drivers.ErrUnsafePath)
	}
	return &os.PathError{Op: op, Path: r.Host(p), Err: err}
}

// parent opens p's parent directory and returns it with p's last component.
func (r *Root) parent(p string) (*os.File, string, error) {
	if err := drivers.CheckPath(p); err != nil {
		return nil, "", err
	}
	d, err := r.OpenDir(path.Dir(p))
	if err != nil {
		return nil, "", err
	}
	return d, path.Base(p), nil
}

// Lstat describes p without following it if it is a symlink. A missing p
// gives an error satisfying errors.Is(err, fs.ErrNotExist), as does a
// missing parent.
func (r *Root) Lstat(p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	d, name, err := r.parent(p)
	if err != nil {
		return st, err
	}
	defer d.Close()
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, &os.PathError{Op: "lstat", Path: r.Host(p), Err: err}
	}
	return st, nil
}

// ReadFile reads the regular file p; a symlink at p is drivers.ErrUnsafePath.
func (r *Root) ReadFile(p string) ([]byte, error) {
	f, err := r.OpenFile(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Look opens p for reading if it is a regular file, without following a
// symlink at p or in a parent, and describes what is there. For anything
// but a regular file (a symlink, a directory, a device: nothing that is
// opened for reading, which for a device could do something) the file is
// nil and st says what it is. A missing p (or parent) gives an error
// satisfying errors.Is(err, fs.ErrNotExist). It is Lstat then OpenFile in
// three system calls where those take eight.
func (r *Root) Look(p string) (io.ReadCloser, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := drivers.CheckPath(p); err != nil {
		return nil, st, err
	}
	// The common case first, a regular file, in four system calls: stat
	// (which may resolve a symlinked parent, but opens nothing), then the
	// open that refuses every symlink, then fstat of what was opened.
	if err := unix.Fstatat(r.fd, p[1:], &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
		fd, err := openBeneath(r.fd, p[1:], unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
		if err == nil {
			if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				// Swapped for something else between the two looks:
				// describe what is there now, the slow way.
				unix.Close(fd)
				return r.lookSlow(p)
			}
			return &fdReader{fd: fd, left: st.Size}, st, nil
		}
		if !errors.Is(err, errNoOpenat2) {
			return nil, st, r.pathErr("open", p, err)
		}
	}
	return r.lookSlow(p)
}

// lookSlow is Look for what is not a regular file, and where there is no
// openat2: it never opens anything but a regular file for reading.
func (r *Root) lookSlow(p string) (io.ReadCloser, unix.Stat_t, error) {
	var st unix.Stat_t
	// O_PATH|O_NOFOLLOW opens even a symlink at p, as itself.
	pfd, err := openBeneath(r.fd, p[1:], oPath|unix.O_NOFOLLOW)
	if errors.Is(err, errNoOpenat2) {
		if st, err = r.Lstat(p); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			return nil, st, err
		}
		f, err := r.OpenFile(p)
		if err != nil {
			return nil, st, err
		}
		return f, st, nil
	}
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, st, &os.PathError{Op: "open", Path: r.Host(p), Err: err}
		}
		return nil, st, r.pathErr("open", p, err)
	}
	err = unix.Fstat(pfd, &st)
	unix.Close(pfd)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, st, err
	}
	fd, err := openBeneath(r.fd, p[1:], unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, st, r.pathErr("open", p, err)
	}
	// What was opened must be what was looked at: a file swapped in
	// between for a device is not read.
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err != nil || st2.Ino != st.Ino || st2.Dev != st.Dev {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("%s changed while it was opened", p)
		}
		return nil, st, &os.PathError{Op: "open", Path: r.Host(p), Err: err}
	}
	return &fdReader{fd: fd, left: st2.Size}, st2, nil
}

// fdReader reads a regular file by its descriptor: os.NewFile would spend
// two more system calls (fcntl, and an attempt to register it for polling)
// on each of the thousands of files a check reads.
//
// It reads the size the file had when it was opened and stops there,
// saving the read that would only say "end of file": a write racing the
// read is seen by the next look.
type fdReader struct {
	fd   int
	left int64
}

func (f *fdReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	for {
		n, err := unix.Read(f.fd, p)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, err
		case n == 0 && len(p) > 0:
			return 0, io.EOF
		}
		f.left -= int64(n)
		return n, nil
	}
}

func (f *fdReader) Close() error { return unix.Close(f.fd) }

// OpenFile opens the regular file p for reading without following a
// symlink at p or in a parent.
func (r *Root) OpenFile(p string) (*os.File, error) {
	d, name, err := r.parent(p)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, r.pathErr("open", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err != nil {
			return nil, &os.PathError{Op: "fstat", Path: r.Host(p), Err: err}
		}
		return nil, fmt.Errorf("open %s: %w: not a regular file", p, drivers.ErrUnsafePath)
	}
	return os.NewFile(uintptr(fd), r.Host(p)), nil
}

// WriteOptions say how WriteFile lays a file down.
type WriteOptions struct {
	Mode     drivers.Mode
	UID, GID int
	// Sync makes the file durable before it is renamed into place, and the
	// rename durable before WriteFile returns. Callers that batch many
	// files stage them with Sync false and call SyncFS once between
	// staging and committing, and once after.
	Sync bool
}

// Staged is a file written beside its destination under a temporary name,
// not yet visible at its path.
type Staged struct {
	root *Root
	// dir is the directory the file was staged in, shared with the other
	// files staged there; nil when it was not held (maxHeldDirs) or was
	// let go, and is opened again to commit or abort.
	dir     *heldDir
	dirPath string
	tmp     string
	name    string
	path    string
	sync    bool
	// unnamed is the descriptor of a file staged without a name, linked
	// into place by Commit; -1 for a file staged under the name tmp.
	unnamed int
}

// StageFile writes data to a file in p's directory with the mode and owner
// of opts: a file without a name (see MaxUnnamed), or else a temporary
// file beside p. Commit links or renames it over p; Abort removes it. A
// reader of p sees the old bytes or, after Commit, the new, never a part.
func (r *Root) StageFile(p string, data []byte, opts WriteOptions) (*Staged, error) {
	if err := drivers.CheckPath(p); err != nil {
		return nil, err
	}
	dirPath, name := path.Dir(p), path.Base(p)
	held, d, err := r.holdDir(dirPath)
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + tmpPrefix(name) + ".mesh-host-" + hex.EncodeToString(rnd[:])
	s := &Staged{root: r, dir: held, dirPath: dirPath, tmp: tmp, name: name, path: p, sync: opts.Sync, unnamed: -1}
	if held == nil {
		// Not held (maxHeldDirs): let go once staged, opened again to
		// commit.
		defer d.Close()
	}
	fd, err := r.createUnnamed(d)
	if fd >= 0 {
		s.unnamed = fd
	} else {
		fd, err = unix.Openat(int(d.Fd()), tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	}
	if err != nil {
		s.letGo()
		return nil, r.pathErr("create", p, err)
	}
	// The temporary file by its descriptor alone, not an os.File: at
	// 100,000 files, an os.File each (its name, its flags asked of the
	// kernel, its cleanup) was a tenth of staging.
	op, err := "write", writeFD(fd, data)
	if err == nil {
		op, err = "chown", unix.Fchown(fd, opts.UID, opts.GID)
	}
	if err == nil {
		// After chown: chown clears setuid and setgid bits.
		op, err = "chmod", unix.Fchmod(fd, uint32(opts.Mode&0o7777))
	}
	if err == nil && opts.Sync {
		op, err = "sync", unix.Fsync(fd)
	}
	if s.unnamed >= 0 {
		if err != nil {
			s.closeUnnamed()
			s.letGo()
			return nil, fmt.Errorf("write %s: %w", p, &os.PathError{Op: op, Path: r.Host(p), Err: err})
		}
		return s, nil
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		op, err = "close", cerr
	}
	if err != nil {
		_ = unix.Unlinkat(int(d.Fd()), tmp, 0)
		s.letGo()
		return nil, fmt.Errorf("write %s: %w", p, &os.PathError{Op: op, Path: r.Host(path.Join(dirPath, tmp)), Err: err})
	}
	return s, nil
}

// createUnnamed makes a file without a name in the directory d
// (O_TMPFILE), mode 0600, when fewer than MaxUnnamed are held and linking
// one in has not failed; else it returns -1 and no error, and the caller
// makes a named temporary file. A filesystem without O_TMPFILE refuses it
// (EOPNOTSUPP, or EISDIR from a kernel that does not know the flag): -1
// too.
func (r *Root) createUnnamed(d *os.File) (int, error) {
	r.heldMu.Lock()
	if r.noUnnamed || r.unnamed >= r.maxUnnamed {
		r.heldMu.Unlock()
		return -1, nil
	}
	r.unnamed++
	r.heldMu.Unlock()
	fd, err := unix.Openat(int(d.Fd()), ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		r.heldMu.Lock()
		r.unnamed--
		r.heldMu.Unlock()
		switch {
		case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.EISDIR), errors.Is(err, unix.EINVAL),
			errors.Is(err, unix.EMFILE), errors.Is(err, unix.ENFILE):
			return -1, nil
		}
		return -1, err
	}
	return fd, nil
}

// closeUnnamed closes the descriptor of a file staged without a name: if
// it was not linked in, the file is gone.
func (s *Staged) closeUnnamed() {
	if s.unnamed < 0 {
		return
	}
	_ = unix.Close(s.unnamed)
	s.unnamed = -1
	s.root.heldMu.Lock()
	s.root.unnamed--
	s.root.heldMu.Unlock()
}

// linkUnnamed gives the file staged without a name the name name in dir:
// linked in directly when nothing is at name, or linked in as the
// temporary name and renamed over what is there (a file, or a symlink
// planted there, never followed).
func (s *Staged) linkUnnamed(dir *os.File) error {
	d := int(dir.Fd())
	err := s.link(d, s.name)
	if !errors.Is(err, unix.EEXIST) {
		return err
	}
	if err := s.link(d, s.tmp); err != nil {
		return err
	}
	if err := unix.Renameat(d, s.tmp, d, s.name); err != nil {
		_ = unix.Unlinkat(d, s.tmp, 0)
		return err
	}
	return nil
}

// link links the unnamed file in as dir/name. AT_EMPTY_PATH asks for
// CAP_DAC_READ_SEARCH on kernels before 6.10, which the host, as root,
// has; without it (ENOENT or EPERM) the file is linked through its
// /proc/self/fd entry, and should that fail too, files are staged named
// from then on.
func (s *Staged) link(dir int, name string) error {
	err := unix.Linkat(s.unnamed, "", dir, name, unix.AT_EMPTY_PATH)
	if !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EPERM) {
		return err
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(s.unnamed), dir, name, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EPERM) {
		s.root.heldMu.Lock()
		s.root.noUnnamed = true
		s.root.heldMu.Unlock()
	}
	return err
}

// writeFD writes all of data to fd.
func writeFD(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// holdDir opens the directory p, checked beneath the root, for files to
// be staged in, or shares the descriptor already held for it. held is nil
// when maxHeldDirs directories are held already: the caller closes d once
// its file is staged.
func (r *Root) holdDir(p string) (held *heldDir, d *os.File, err error) {
	shared := func() *heldDir {
		h := r.held[p]
		if h == nil || time.Since(h.opened) > r.shareHeldFor {
			return nil
		}
		h.refs++
		return h
	}
	r.heldMu.Lock()
	h := shared()
	r.heldMu.Unlock()
	if h != nil {
		return h, h.f, nil
	}
	f, err := r.OpenDir(p)
	if err != nil {
		return nil, nil, err
	}
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if h := shared(); h != nil {
		// Another file's staging opened it meanwhile.
		f.Close()
		return h, h.f, nil
	}
	if r.heldOpen >= maxHeldDirs {
		return nil, f, nil
	}
	if r.held == nil {
		r.held = map[string]*heldDir{}
	}
	r.heldOpen++
	// In place of one held too long, which its staged files still hold.
	h = &heldDir{f: f, refs: 1, opened: time.Now()}
	r.held[p] = h
	return h, f, nil
}

// letGo lets the staged file's directory go: closed once no other staged
// file holds it.
func (s *Staged) letGo() {
	h := s.dir
	if h == nil {
		return
	}
	s.dir = nil
	r := s.root
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	if h.refs--; h.refs > 0 {
		return
	}
	h.f.Close()
	r.heldOpen--
	if r.held[s.dirPath] == h {
		delete(r.held, s.dirPath)
	}
}

// openDir is the staged file's directory, and a func to let it go: the
// one held since staging, or the directory opened again by its path. A
// directory replaced meanwhile does not hold the temporary file, so the
// rename fails rather than land elsewhere.
func (s *Staged) openDir() (*os.File, func(), error) {
	if s.dir != nil {
		return s.dir.f, s.letGo, nil
	}
	d, _, err := s.root.parent(s.path)
	if err != nil {
		return nil, nil, err
	}
	return d, func() { d.Close() }, nil
}

// tmpPrefix is as much of name as a temporary name can carry: a name is at
// most 255 bytes (NAME_MAX), and the temporary one adds 24 to it.
func tmpPrefix(name string) string {
	const room = 255 - len(".") - len(".mesh-host-") - 12
	if len(name) > room {
		return name[:room]
	}
	return name
}

// Commit links or renames the staged file over its path (replacing a
// file, or a symlink planted there, never following it).
func (s *Staged) Commit() error {
	dir, done, err := s.openDir()
	if err != nil {
		return s.root.pathErr("rename into place", s.path, err)
	}
	defer done()
	if s.unnamed >= 0 {
		defer s.closeUnnamed()
		if err := s.linkUnnamed(dir); err != nil {
			return s.root.pathErr("link into place", s.path, err)
		}
	} else if err := unix.Renameat(int(dir.Fd()), s.tmp, int(dir.Fd()), s.name); err != nil {
		_ = unix.Unlinkat(int(dir.Fd()), s.tmp, 0)
		return s.root.pathErr("rename into place", s.path, err)
	}
	if s.sync {
		if err := dir.Sync(); err != nil {
			return fmt.Errorf("sync directory of %s: %w", s.path, err)
		}
	}
	return nil
}

// Flush makes the staged bytes durable with an fsync of the temporary
// file alone: for a few files, cheaper than SyncFS, and it flushes
// nothing of the machine's other work. Before Commit.
func (s *Staged) Flush() error {
	if s.unnamed >= 0 {
		if err := unix.Fsync(s.unnamed); err != nil {
			return fmt.Errorf("sync %s: %w", s.path, err)
		}
		return nil
	}
	return s.useDir(func(dir *os.File) error {
		fd, err := unix.Openat(int(dir.Fd()), s.tmp, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return s.root.pathErr("sync", s.path, err)
		}
		defer unix.Close(fd)
		if err := unix.Fsync(fd); err != nil {
			return fmt.Errorf("sync %s: %w", s.path, err)
		}
		return nil
	})
}

// FlushRename makes a Commit's rename durable with an fsync of the
// directory alone. After Commit.
func (s *Staged) FlushRename() error {
	return s.useDir(func(dir *os.File) error {
		if err := dir.Sync(); err != nil {
			return fmt.Errorf("sync directory of %s: %w", s.path, err)
		}
		return nil
	})
}

// useDir runs fn on the staged file's directory: the one held, which it
// keeps, or the directory opened again by its path.
func (s *Staged) useDir(fn func(dir *os.File) error) error {
	if s.dir != nil {
		return fn(s.dir.f)
	}
	d, _, err := s.root.parent(s.path)
	if err != nil {
		return s.root.pathErr("open the directory of", s.path, err)
	}
	defer d.Close()
	return fn(d)
}

// Abort removes the staged file.
func (s *Staged) Abort() {
	if s.unnamed >= 0 {
		s.closeUnnamed()
		s.letGo()
		return
	}
	dir, done, err := s.openDir()
	if err != nil {
		return // the directory is gone or replaced: so is the file
	}
	defer done()
	_ = unix.Unlinkat(int(dir.Fd()), s.tmp, 0)
}

// WriteFile writes p atomically: StageFile then Commit.
func (r *Root) WriteFile(p string, data []byte, opts WriteOptions) error {
	s, err := r.StageFile(p, data, opts)
	if err != nil {
		return err
	}
	return s.Commit()
}

// SyncFS flushes the filesystem holding the root: one call makes every
// staged file durable, where an fsync each would cost one flush per file.
func (r *Root) SyncFS() error {
	d, err := r.OpenDir("/")
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syncFS(d); err != nil {
		return fmt.Errorf("sync filesystem of %s: %w", r.dir, err)
	}
	return nil
}

// Mkdir creates the directory p (its parent must exist) with mode and
// owner; an existing directory is left as it is, and anything else in the
// way is an error (drivers.ErrUnsafePath for a symlink). It returns whether it
// created p.
func (r *Root) Mkdir(p string, mode drivers.Mode, uid, gid int) (bool, error) {
	d, name, err := r.parent(p)
	if err != nil {
		return false, err
	}
	defer d.Close()
	err = unix.Mkdirat(int(d.Fd()), name, 0o700)
	if errors.Is(err, unix.EEXIST) {
		// Only a directory counts: a file, or a symlink (even to a
		// directory), in the way is not the directory p.
		var st unix.Stat_t
		if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return false, r.pathErr("lstat", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			return false, nil
		case unix.S_IFLNK:
			return false, fmt.Errorf("mkdir %s: %w: a symlink is in the way; the host never follows one", p, drivers.ErrUnsafePath)
		}
		return false, fmt.Errorf("mkdir %s: %w: something that is not a directory is in the way", p, os.ErrExist)
	}
	if err != nil {
		return false, r.pathErr("mkdir", p, err)
	}
	return true, r.Chown(p, mode, uid, gid)
}

// Chown sets the mode and owner of the regular file or directory p,
// without following a symlink at p; anything else at p is
// drivers.ErrUnsafePath.
func (r *Root) Chown(p string, mode drivers.Mode, uid, gid int) error {
	d, name, err := r.parent(p)
	if err != nil {
		return err
	}
	defer d.Close()
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return r.pathErr("open", p, err)
	}
	f := os.NewFile(uintptr(fd), r.Host(p))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "fstat", Path: r.Host(p), Err: err}
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		return fmt.Errorf("chown %s: %w: not a regular file or directory", p, drivers.ErrUnsafePath)
	}
	if err := f.Chown(uid, gid); err != nil {
		return err
	}
	return f.Chmod(os.FileMode(mode&0o777) | modeBits(mode))
}

// Remove removes the file p, or the directory p if it is empty: a directory
// holding anything gives an error wrapping unix.ENOTEMPTY and is left. A
// missing p is not an error.
func (r *Root) Remove(p string) error {
	d, name, err := r.parent(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return r.pathErr("lstat", p, err)
	}
	flags := 0
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(int(d.Fd()), name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return r.pathErr("remove", p, err)
	}
	return nil
}

// LookupUser resolves a user name in the root's own etc/passwd ("root" is
// 0 even without one).
func (r *Root) LookupUser(name string) (int, error) { return r.lookupID("/etc/passwd", "user", name) }

// LookupGroup resolves a group name in the root's own etc/group.
func (r *Root) LookupGroup(name string) (int, error) { return r.lookupID("/etc/group", "group", name) }

func (r *Root) lookupID(file, what, name string) (int, error) {
	if name == "" || name == "root" {
		return 0, nil // root is 0 everywhere, passwd file or not
	}
	id, err := r.findID(file, name)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q: %v", drivers.ErrInvalidSpec, what, name, err)
	}
	return id, nil
}

func (r *Root) findID(file, name string) (int, error) {
	var found []string
	err := r.EachAccountEntry(file, func(f []string) bool {
		if len(f) >= 3 && f[0] == name {
			found = f
			return false
		}
		return true
	})
	switch {
	case err != nil:
		return 0, fmt.Errorf("not found: cannot read %s in the root: %w", file, err)
	case found == nil:
		return 0, fmt.Errorf("not found in the root's %s", file)
	}
	id, err := strconv.Atoi(found[2])
	if err != nil {
		return 0, fmt.Errorf("%s names %q with id %q", file, name, found[2])
	}
	return id, nil
}

// EachAccountEntry calls fn with the colon-separated fields of each line
// of one of the root's own account files (/etc/passwd, /etc/group), in
// order, until fn returns false. A missing file is an error wrapping
// fs.ErrNotExist.
func (r *Root) EachAccountEntry(file string, fn func(fields []string) bool) error {
	b, err := r.ReadFile(file)
	if err != nil {
		return err
	}
	// Lines of any length: a bufio.Scanner would stop at a 64 KiB line
	// and report the name as missing.
	for line := range bytes.Lines(b) {
		if !fn(strings.Split(strings.TrimRight(string(line), "\r\n"), ":")) {
			return nil
		}
	}
	return nil
}

// SweepStaged removes the temporary files StageFile left in directory dir
// (".NAME.mesh-host-" and 12 hex digits) when a process was killed between
// staging and committing. Call it before staging into dir; one writer at a
// time holds the journal, so no live staged file is removed.
func (r *Root) SweepStaged(dir string) error {
	d, err := r.OpenDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, n := range names {
		if !isStagedName(n) {
			continue
		}
		if err := unix.Unlinkat(int(d.Fd()), n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return r.pathErr("remove leftover", path.Join(dir, n), err)
		}
	}
	return nil
}

// isStagedName reports whether n is a name StageFile gives.
func isStagedName(n string) bool {
	i := strings.LastIndex(n, ".mesh-host-")
	if !strings.HasPrefix(n, ".") || i < 1 || len(n)-i != len(".mesh-host-")+12 {
		return false
	}
	_, err := hex.DecodeString(n[i+len(".mesh-host-"):])
	return err == nil
}

// FileType names what a stat mode says is there, as drivers report it in
// an Observation: "file", "directory", "symlink", "fifo", "socket",
// "device".
func FileType(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "device"
}

// modeBits maps setuid, setgid and sticky to os.FileMode bits.
func modeBits(m drivers.Mode) os.FileMode {
	var fm os.FileMode
	if m&0o4000 != 0 {
		fm |= os.ModeSetuid
	}
	if m&0o2000 != 0 {
		fm |= os.ModeSetgid
	}
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}
