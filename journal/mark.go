package journal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// MarkSuffix names a journal's damage mark: the file PATH.damaged beside
// the journal at PATH. Whatever finds damage in the journal leaves it, and
// Open refuses a journal whose mark names it before bbolt reads a page. A
// command reads only what it needs of the journal, so damage in what one
// reads must stop the next, which may read nothing of it; and a host whose
// daily scrub found damage must not go on answering from the rest.
const MarkSuffix = ".damaged"

// markHeader begins every mark; the identity of the journal file it is
// for follows it on the same line.
const markHeader = "mesh-host journal damage mark:"

// maxMark bounds what is read of a mark and what is written to one: the
// first line and a damage's description.
const maxMark = 8 << 10

// markPath is the damage mark of the journal at path.
func markPath(path string) string { return path + MarkSuffix }

// fileID is a file's identity: its device, inode and birth time. A mark
// holds its journal's, so that the journal moved aside takes the mark's
// meaning with it: the new file at the same path, or a copy restored and
// renamed into place, is another file. The birth time tells a file from a
// later one given the inode of one deleted since (a restored copy renamed
// over the damaged file frees its inode, and the next file made may take
// it); it is zero where the file system keeps none.
type fileID struct {
	dev, ino uint64
	born     unix.StatxTimestamp
}

func idOf(path string) (fileID, error) {
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_INO|unix.STATX_BTIME, &st); err != nil {
		return fileID{}, err
	}
	id := fileID{dev: unix.Mkdev(st.Dev_major, st.Dev_minor), ino: st.Ino}
	if st.Mask&unix.STATX_BTIME != 0 {
		id.born = st.Btime
	}
	return id, nil
}

func (id fileID) String() string {
	return fmt.Sprintf("dev %d inode %d born %d.%09d", id.dev, id.ino, id.born.Sec, id.born.Nsec)
}

// checkMark refuses the journal at path, whose file is fi, when its damage
// mark names it. A mark that names another file (the one moved aside) is
// stale: a writer removes it. A mark that cannot be read for what it says
// (a symbolic link, not a regular file, unreadable, malformed) is damage
// too: it may have named this file, and a link is never followed.
func checkMark(path string, readOnly bool) error {
	mark := markPath(path)
	f, err := os.OpenFile(mark, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case errors.Is(err, syscall.ELOOP):
		return markErr(path, fmt.Errorf("its damage mark %s is a symbolic link, which is not followed", mark))
	case err != nil:
		return markErr(path, fmt.Errorf("its damage mark %s cannot be read: %w", mark, err))
	}
	defer f.Close()
	mfi, err := f.Stat()
	if err != nil {
		return markErr(path, fmt.Errorf("its damage mark %s cannot be read: %w", mark, err))
	}
	if !mfi.Mode().IsRegular() {
		return markErr(path, fmt.Errorf("its damage mark %s is not a regular file (%s)", mark, mfi.Mode().Type()))
	}
	b, err := io.ReadAll(io.LimitReader(f, maxMark))
	if err != nil {
		return markErr(path, fmt.Errorf("its damage mark %s cannot be read: %w", mark, err))
	}
	marked, cause, ok := parseMark(b)
	if !ok {
		return markErr(path, fmt.Errorf("its damage mark %s does not say which file it is for", mark))
	}
	if id, err := idOf(path); err == nil && id != marked {
		if !readOnly {
			// The damaged file was moved aside (or replaced): this one
			// was never found damaged. A reader leaves the mark for a
			// writer to remove, as it writes nothing.
			_ = os.Remove(mark)
		}
		return nil
	}
	return markErr(path, fmt.Errorf("damage was found in it before (marked in %s): %s", mark, cause))
}

// parseMark reads a mark: its header line with the journal's identity,
// then the damage it describes.
func parseMark(b []byte) (id fileID, cause string, ok bool) {
	line, rest, _ := bytes.Cut(b, []byte("\n"))
	fields := strings.Fields(strings.TrimPrefix(string(line), markHeader))
	if !bytes.HasPrefix(line, []byte(markHeader)) || len(fields) != 6 || fields[0] != "dev" || fields[2] != "inode" || fields[4] != "born" {
		return fileID{}, "", false
	}
	sec, nsec, _ := strings.Cut(fields[5], ".")
	var errs [4]error
	id.dev, errs[0] = strconv.ParseUint(fields[1], 10, 64)
	id.ino, errs[1] = strconv.ParseUint(fields[3], 10, 64)
	id.born.Sec, errs[2] = strconv.ParseInt(sec, 10, 64)
	n, err := strconv.ParseUint(nsec, 10, 32)
	id.born.Nsec, errs[3] = uint32(n), err
	if errors.Join(errs[:]...) != nil {
		return fileID{}, "", false
	}
	return id, strings.TrimSpace(strings.ToValidUTF8(string(rest), "?")), true
}

// markErr is damage found through the mark: the journal's recovery
// message, and nothing to mark again.
func markErr(path string, err error) error {
	return &damageError{path: path, err: err, marked: true}
}

// writeMark leaves the mark of damage (a *damageError) beside the
// journal at path: atomically (a temporary file renamed into place, so a
// crash leaves the whole mark or none), owner-only, holding the file's
// identity and what was found. It holds a damage's description only: what
// was found in which record or key, never a payload. A mark that cannot be
// written changes nothing of the damage returned: the command that found
// it stops with it all the same.
func writeMark(path string, damage error) {
	var d *damageError
	if !errors.As(damage, &d) || d.marked {
		return
	}
	id, err := idOf(path)
	if err != nil {
		return
	}
	cause := strings.ToValidUTF8(d.err.Error(), "?")
	if len(cause) > maxMark/2 {
		cause = cause[:maxMark/2] + "…"
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(markPath(path))+".new-*")
	if err != nil {
		return
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "%s %s\n%s\n", markHeader, id, cause)
	if w.Flush() != nil || f.Sync() != nil || f.Close() != nil {
		f.Close()
		return
	}
	if os.Rename(tmp, markPath(path)) == nil {
		_ = syncDir(dir)
	}
}

// clearMark removes the mark beside a journal just created at path: a new
// file was never found damaged, and may have the inode of the one a stale
// mark names, deleted since.
func clearMark(path string) { _ = os.Remove(markPath(path)) }
