package archive

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
)

// What inspect found at a destination.
const (
	foundAbsent = iota
	foundOther  // a symlink, file, device: anything but a directory
	foundDir
)

type found struct {
	kind int
	// what names a foundOther ("symlink", "regular file", …).
	what string
	// digest is the digest marker's content, "" when there is none.
	digest  string
	arrived bool
}

// inspect looks at name in the directory dirfd without following it.
func inspect(dirfd int, name string) (found, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return found{kind: foundAbsent}, nil
		}
		return found{}, fmt.Errorf("lstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return found{kind: foundOther, what: typeName(uint32(st.Mode))}, nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return found{kind: foundAbsent}, nil
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return found{kind: foundOther, what: "symlink or file"}, nil // swapped since the lstat
	}
	if err != nil {
		return found{}, fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	f := found{kind: foundDir}
	if b, ok := readSmall(fd, DigestFile); ok {
		f.digest = strings.TrimSpace(string(b))
	}
	_, f.arrived = readSmall(fd, ArrivedFile)
	return f, nil
}

func (f found) observation(want string) drivers.Observation {
	switch {
	case f.kind == foundAbsent:
		return drivers.Observation{Differs: []string{"absent"}}
	case f.kind == foundOther:
		return drivers.Observation{Exists: true, Differs: []string{"type"},
			Note: "a " + f.what + " is at the destination, not a directory; it is never followed"}
	case f.digest != want:
		o := drivers.Observation{Exists: true, Differs: []string{"content"}, Seen: f.digest}
		if f.digest == "" {
			o.Note = "no " + DigestFile + " in the directory: not unpacked by mesh-host, or the marker was removed"
		}
		return o
	case !f.arrived:
		return drivers.Observation{Exists: true, Differs: []string{"arrival"}, Seen: f.digest,
			Note: "no " + ArrivedFile + ": the host stopped before it marked the arrival"}
	}
	return drivers.Observation{Exists: true, InSync: true, Seen: f.digest}
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "non-directory"
}

// readSmall reads the regular file name in dirfd, up to 4 KiB, without
// following a symlink. ok is false when there is no such regular file.
func readSmall(dirfd int, name string) (b []byte, ok bool) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, false
	}
	b, err = io.ReadAll(io.LimitReader(f, 4096))
	return b, err == nil
}

// The kinds of temporary name beside a destination.
var tempKinds = []string{"stage", "old", "fetch"}

const tempRandLen = 12 // hex digits

// tempName is a fresh name beside base: ".BASE.mesh-host-KIND-RANDOM".
func tempName(base, kind string) string {
	var rnd [tempRandLen / 2]byte
	_, _ = rand.Read(rnd[:])
	return tempPrefix(base) + kind + "-" + hex.EncodeToString(rnd[:])
}

// tempPrefix begins base's temporary names. A name is at most 255 bytes
// (NAME_MAX): a base too long to fit is cut, and a hash of it added so
// that two long bases that begin alike do not share temporary names.
func tempPrefix(base string) string {
	const room = 255 - len(".") - len(".mesh-host-") - len("stage-") - tempRandLen
	if len(base) > room {
		h := sha256.Sum256([]byte(base))
		base = base[:room-9] + "~" + hex.EncodeToString(h[:4])
	}
	return "." + base + ".mesh-host-"
}

// isTempName reports whether name is a temporary name of base's.
func isTempName(base, name string) bool {
	rest, ok := strings.CutPrefix(name, tempPrefix(base))
	if !ok {
		return false
	}
	for _, k := range tempKinds {
		if r, ok := strings.CutPrefix(rest, k+"-"); ok {
			return len(r) == tempRandLen && strings.Trim(r, "0123456789abcdef") == ""
		}
	}
	return false
}

// sweep removes base's temporary names left in dirfd by a process that
// stopped mid-way. It is best effort: what it cannot remove waits for the
// next sweep.
func sweep(dirfd int, base string) {
	names, err := listDir(dirfd)
	if err != nil {
		return
	}
	for _, n := range names {
		if isTempName(base, n) {
			_ = removeTree(context.Background(), dirfd, n)
		}
	}
}

// listDir lists the names in the directory dirfd.
func listDir(dirfd int) ([]string, error) {
	fd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	d := os.NewFile(uintptr(fd), ".")
	defer d.Close()
	return d.Readdirnames(-1)
}

// remove makes base in dir absent: a directory is renamed aside, so that
// it vanishes from its path at once, then removed; anything else is
// unlinked, never followed.
func remove(ctx context.Context, dir *os.File, base string) error {
	dfd := int(dir.Fd())
	sweep(dfd, base)
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("lstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dfd, base, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unlink: %w", err)
		}
		return nil
	}
	aside := tempName(base, "old")
	if err := unix.Renameat(dfd, base, dfd, aside); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("rename aside: %w", err)
	}
	_ = dir.Sync()
	// Cancelled part way, the rest waits, out of sight, for the next sweep.
	if err := removeTree(ctx, dfd, aside); err != nil {
		return fmt.Errorf("remove old tree: %w", err)
	}
	return nil
}

// removeTree removes name in dirfd and, if it is a directory, everything
// in it, with *at calls that never follow a symlink. It checks ctx between
// entries.
func removeTree(ctx context.Context, dirfd int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unlink %s: %w", name, err)
		}
		return nil
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	d := os.NewFile(uintptr(fd), name)
	defer d.Close()
	if st.Mode&0o700 != 0o700 {
		// Entries of a directory its owner cannot write cannot be removed.
		_ = unix.Fchmod(fd, 0o700)
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("list %s: %w", name, err)
	}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := removeTree(ctx, fd, n); err != nil {
			return err
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove %s: %w", name, err)
	}
	return nil
}

// arrivalLayout is RFC 3339 with all nine fraction digits.
const arrivalLayout = "2006-01-02T15:04:05.000000000Z07:00"

// markArrival writes the arrival marker into the directory base in dirfd:
// the time, and a counter one more than any sibling directory's.
func (d *Driver) markArrival(dirfd int, base string) error {
	d.arrival.Lock()
	defer d.arrival.Unlock()
	var greatest uint64
	names, err := listDir(dirfd)
	if err != nil {
		return fmt.Errorf("mark arrival: list siblings: %w", err)
	}
	for _, n := range names {
		if n == base || (strings.HasPrefix(n, ".") && strings.Contains(n, ".mesh-host-")) {
			continue
		}
		if c, ok := arrivalCounter(dirfd, n); ok && c > greatest {
			greatest = c
		}
	}
	line := d.opts.Now().UTC().Format(arrivalLayout) + " " + strconv.FormatUint(greatest+1, 10) + "\n"

	fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("mark arrival: open: %w", err)
	}
	dir := os.NewFile(uintptr(fd), base)
	defer dir.Close()
	if err := writeFileAt(fd, ArrivedFile, []byte(line), 0o644); err != nil {
		return fmt.Errorf("mark arrival: %w", err)
	}
	return dir.Sync()
}

// arrivalCounter reads the counter of the arrival marker in the directory
// name in dirfd.
func arrivalCounter(dirfd int, name string) (uint64, bool) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	b, ok := readSmall(fd, ArrivedFile)
	if !ok {
		return 0, false
	}
	_, num, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok {
		return 0, false
	}
	c, err := strconv.ParseUint(num, 10, 64)
	return c, err == nil
}

// writeFileAt writes name in dirfd whole: a temporary file, synced, then
// renamed over name.
func writeFileAt(dirfd int, name string, data []byte, mode uint32) error {
	tmp := tempName(name, "stage")
	fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(os.FileMode(mode))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dirfd, tmp, 0)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
