package archive

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
)

// unpacker lays an archive's entries down beneath the staging directory,
// counting against the limits.
type unpacker struct {
	ctx        context.Context
	stage      int    // the staging directory
	format     string // for messages
	maxBytes   int64
	maxEntries int
	bytes      int64
	entries    int
}

// unpack reads the archive in f, of u's format, into u's staging
// directory.
func (u *unpacker) unpack(f *os.File) error {
	switch u.format {
	case drivers.FormatZip:
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		return u.zip(&ctxReaderAt{ctx: u.ctx, r: f}, fi.Size())
	case drivers.FormatTar:
		return u.tar(bufio.NewReaderSize(&ctxReader{ctx: u.ctx, r: f}, 64<<10))
	case drivers.FormatTarGz:
		zr, err := gzip.NewReader(&ctxReader{ctx: u.ctx, r: f})
		if err != nil {
			return u.corrupt("", err)
		}
		defer zr.Close()
		return u.compressedTar(zr)
	case drivers.FormatTarZst:
		zr, err := zstd.NewReader(&ctxReader{ctx: u.ctx, r: f},
			zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20))
		if err != nil {
			return u.corrupt("", err)
		}
		defer zr.Close()
		return u.compressedTar(zr)
	}
	return fmt.Errorf("%w: format %q", drivers.ErrInvalidSpec, u.format)
}

// compressedTar unpacks the tar in zr, then reads on a little past the
// tar's end so that the compressor's own checksum is checked.
func (u *unpacker) compressedTar(zr io.Reader) error {
	if err := u.tar(zr); err != nil {
		return err
	}
	if _, err := io.CopyN(io.Discard, zr, 1<<20); err != nil && err != io.EOF {
		return u.corrupt("", err)
	}
	return nil
}

// corrupt says the archive could not be read, or that ctx ended the read.
func (u *unpacker) corrupt(what string, err error) error {
	if cerr := u.ctx.Err(); cerr != nil {
		return cerr
	}
	if what != "" {
		return fmt.Errorf("%w: %s: %s: %w", ErrCorrupt, u.format, what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrCorrupt, u.format, err)
}

func (u *unpacker) tar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			// ErrInsecurePath comes with its header: refused below, by name.
			return u.corrupt("", err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // pax global header (git archive writes one): no file
		}
		if err := u.count(hdr.Name); err != nil {
			return err
		}
		var why string
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir:
		case tar.TypeSymlink:
			why = "symlinks are refused (to " + fmt.Sprintf("%q", hdr.Linkname) + ")"
		case tar.TypeLink:
			why = "hard links are refused (to " + fmt.Sprintf("%q", hdr.Linkname) + ")"
		case tar.TypeChar:
			why = "character devices are refused"
		case tar.TypeBlock:
			why = "block devices are refused"
		case tar.TypeFifo:
			why = "fifos are refused"
		default:
			why = fmt.Sprintf("entry type %q is refused: only regular files and directories are unpacked", hdr.Typeflag)
		}
		if why != "" {
			return unsafeEntry(hdr.Name, why)
		}
		if hdr.Mode&0o6000 != 0 {
			return unsafeEntry(hdr.Name, fmt.Sprintf("setuid and setgid bits are refused (mode %04o)", hdr.Mode&0o7777))
		}
		perm := fs.FileMode(hdr.Mode) & fs.ModePerm
		if hdr.Typeflag == tar.TypeDir {
			err = u.dir(hdr.Name, perm)
		} else {
			err = u.file(hdr.Name, perm, hdr.Size, hdr.ModTime, tr)
		}
		if err != nil {
			return err
		}
	}
}

func (u *unpacker) zip(r io.ReaderAt, size int64) error {
	zr, err := zip.NewReader(r, size)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return u.corrupt("", err)
	}
	for _, f := range zr.File {
		if err := u.count(f.Name); err != nil {
			return err
		}
		m := f.Mode()
		var why string
		switch {
		case m&fs.ModeSymlink != 0:
			why = "symlinks are refused"
		case m&fs.ModeCharDevice != 0:
			why = "character devices are refused"
		case m&fs.ModeDevice != 0:
			why = "block devices are refused"
		case m&fs.ModeNamedPipe != 0:
			why = "fifos are refused"
		case m&fs.ModeSocket != 0:
			why = "sockets are refused"
		case !m.IsDir() && !m.IsRegular():
			why = fmt.Sprintf("file type %v is refused: only regular files and directories are unpacked", m.Type())
		case m&(fs.ModeSetuid|fs.ModeSetgid) != 0:
			octal := m.Perm()
			if m&fs.ModeSetuid != 0 {
				octal |= 0o4000
			}
			if m&fs.ModeSetgid != 0 {
				octal |= 0o2000
			}
			why = fmt.Sprintf("setuid and setgid bits are refused (mode %04o)", uint32(octal))
		}
		if why != "" {
			return unsafeEntry(f.Name, why)
		}
		if m.IsDir() {
			if err := u.dir(f.Name, m.Perm()); err != nil {
				return err
			}
			continue
		}
		if f.UncompressedSize64 > math.MaxInt64 {
			return u.tooBig(f.Name)
		}
		rc, err := f.Open()
		if err != nil {
			return u.corrupt(fmt.Sprintf("entry %q", f.Name), err)
		}
		err = u.file(f.Name, m.Perm(), int64(f.UncompressedSize64), f.Modified, rc)
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func unsafeEntry(name, why string) error {
	return fmt.Errorf("%w %q: %s", ErrUnsafeEntry, name, why)
}

// count counts one more entry against MaxEntries.
func (u *unpacker) count(name string) error {
	if err := u.ctx.Err(); err != nil {
		return err
	}
	u.entries++
	if u.entries > u.maxEntries {
		return fmt.Errorf("%w: entry %q: the archive holds more than %d entries (Options.MaxEntries)", ErrLimit, name, u.maxEntries)
	}
	return nil
}

func (u *unpacker) tooBig(name string) error {
	return fmt.Errorf("%w: entry %q: the archive unpacks to more than %d bytes (Options.MaxBytes)", ErrLimit, name, u.maxBytes)
}

// components splits an entry's name into the path components it lays
// down beneath the destination, refusing every way out of it.
func components(name string) ([]string, error) {
	switch {
	case name == "":
		return nil, unsafeEntry(name, "an empty name is refused")
	case strings.HasPrefix(name, "/"):
		return nil, unsafeEntry(name, "absolute names are refused")
	case strings.ContainsRune(name, '\\'):
		return nil, unsafeEntry(name, "a backslash in a name is refused (a Windows separator elsewhere)")
	case strings.ContainsRune(name, 0):
		return nil, unsafeEntry(name, "a NUL in a name is refused")
	}
	var out []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, unsafeEntry(name, `a ".." component is refused`)
		}
		out = append(out, c)
	}
	if len(out) == 1 && strings.HasPrefix(out[0], ".mesh-host-") {
		return nil, unsafeEntry(name, "names beginning .mesh-host- at the top are the driver's own")
	}
	return out, nil
}

// dir makes the directory name, and any parent missing, with mode perm
// (always rwx for its owner, never group or other write).
func (u *unpacker) dir(name string, perm fs.FileMode) error {
	comps, err := components(name)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return nil // the destination itself ("./"): its mode is the driver's
	}
	fd, err := u.walk(name, comps)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, dirMode(perm)); err != nil {
		return fmt.Errorf("entry %q: chmod: %w", name, err)
	}
	return nil
}

func dirMode(perm fs.FileMode) uint32 { return uint32(perm|0o700) &^ 0o022 }

// walk opens the directory comps beneath the staging directory, making
// each missing one (mode 0755), never following a symlink. The caller
// closes the result.
func (u *unpacker) walk(name string, comps []string) (int, error) {
	cur, err := unix.Openat(u.stage, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range comps {
		next, err := openDirAt(cur, c)
		unix.Close(cur)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			return -1, unsafeEntry(name, fmt.Sprintf("its parent %q is not a directory", c))
		}
		if err != nil {
			return -1, fmt.Errorf("entry %q: directory %q: %w", name, c, err)
		}
		cur = next
	}
	return cur, nil
}

// openDirAt opens the directory name in dirfd without following a symlink,
// making it (mode 0755) if it is missing.
func openDirAt(dirfd int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(dirfd, name, flags, 0)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
		return -1, err
	}
	if fd, err = unix.Openat(dirfd, name, flags, 0); err != nil {
		return -1, err
	}
	if err := unix.Fchmod(fd, dirMode(0o755)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// file writes the regular file name from r, size bytes, with mode perm
// less group and other write, and modification time mtime.
func (u *unpacker) file(name string, perm fs.FileMode, size int64, mtime time.Time, r io.Reader) error {
	comps, err := components(name)
	if err != nil {
		return err
	}
	if len(comps) == 0 {
		return unsafeEntry(name, "a file in the destination's own place is refused")
	}
	budget := u.maxBytes - u.bytes
	if size > budget {
		return u.tooBig(name)
	}
	pfd, err := u.walk(name, comps[:len(comps)-1])
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	last := comps[len(comps)-1]
	fd, err := unix.Openat(pfd, last, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return unsafeEntry(name, "a second entry of the same name is refused")
	}
	if err != nil {
		return fmt.Errorf("entry %q: create: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	src := &readErr{r: io.LimitReader(r, budget+1)}
	n, err := io.Copy(f, src)
	u.bytes += n
	switch {
	case src.err != nil:
		return u.corrupt(fmt.Sprintf("entry %q", name), src.err)
	case err != nil:
		return fmt.Errorf("entry %q: write: %w", name, err)
	case n > budget:
		return u.tooBig(name)
	}
	if err := f.Chmod(fs.FileMode(uint32(perm) &^ 0o022)); err != nil {
		return fmt.Errorf("entry %q: chmod: %w", name, err)
	}
	if !mtime.IsZero() {
		ts := unix.NsecToTimespec(mtime.UnixNano())
		_ = unix.UtimesNanoAt(pfd, last, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	}
	return f.Close()
}

// readErr remembers the error of its reader, telling a corrupt archive
// from a failing disk.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}
