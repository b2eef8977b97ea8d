package upgrade

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Version is one version directory on disk.
type Version struct {
	// Name is the directory's name: the artifact's digest hex, or the
	// name the archive path gave.
	Name string
	// Counter is the arrival marker's counter: greater arrived later.
	Counter uint64
	// Arrived is the marker's time, zero when it does not parse (it is for
	// people; Counter decides).
	Arrived time.Time
	// Dir is the directory, VERSIONS/NAME.
	Dir string
}

// Executable is the version's mesh-host.
func (v Version) Executable() string { return filepath.Join(v.Dir, Executable) }

// maxCounterDigits keeps a counter within what sh arithmetic compares.
const maxCounterDigits = 18

// maxMarker is more than a marker line ever holds.
const maxMarker = 4096

// validName reports whether name can be a version's name: 1 to 255 of
// A-Z a-z 0-9 . _ + -, not starting with ".". Names outside it are not
// versions (the launcher would have to quote what it cannot).
func validName(name string) bool {
	if name == "" || len(name) > 255 || name[0] == '.' {
		return false
	}
	for _, c := range []byte(name) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '+', c == '-':
		default:
			return false
		}
	}
	return true
}

// ParseArrival reads an arrival marker: its first line must be two fields
// separated by spaces or tabs, a time and a counter of 1 to 18 decimal
// digits. The time is parsed as RFC 3339 when it can be and left zero when
// not: the counter is what orders arrivals.
func ParseArrival(b []byte) (arrived time.Time, counter uint64, err error) {
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.FieldsFunc(line, func(r rune) bool { return r == ' ' || r == '\t' })
	if len(f) != 2 || len(f[1]) > maxCounterDigits || strings.Trim(f[1], "0123456789") != "" {
		return time.Time{}, 0, fmt.Errorf("%w: %q", ErrBadMarker, line)
	}
	counter, err = strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("%w: %q", ErrBadMarker, line)
	}
	if t, err := time.Parse(time.RFC3339Nano, f[0]); err == nil {
		arrived = t.UTC()
	}
	return arrived, counter, nil
}

// List returns the versions in dir, oldest arrival first (by counter; ties
// by name). A missing dir holds no versions and is not an error.
// Half-delivered directories, symlinks and dot-names are left out (see the
// package doc).
func List(dir string) ([]Version, error) {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	defer root.Close()
	d, err := root.Open(".")
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("list versions in %s: %w", dir, err)
	}
	var vs []Version
	for _, n := range names {
		v, err := lookup(root, dir, n)
		if err == nil {
			vs = append(vs, v)
		}
	}
	sortVersions(vs)
	return vs, nil
}

func sortVersions(vs []Version) {
	// Newest last; of equal counters the name sorting first is the newer,
	// so it is last.
	slices.SortFunc(vs, func(a, b Version) int {
		if c := cmp.Compare(a.Counter, b.Counter); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
}

// Lookup returns the version name in dir, or an error wrapping
// ErrNotVersion when it is not one.
func Lookup(dir, name string) (Version, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Version{}, fmt.Errorf("%w: %s: %w", ErrNotVersion, name, err)
	}
	defer root.Close()
	return lookup(root, dir, name)
}

// lookup reads one candidate through root, never following a symlink: the
// directory, its executable and its marker are lstat'ed first.
func lookup(root *os.Root, dir, name string) (Version, error) {
	notVersion := func(why string) (Version, error) {
		return Version{}, fmt.Errorf("%w: %s: %s", ErrNotVersion, filepath.Join(dir, name), why)
	}
	if !validName(name) {
		return notVersion("not a version name")
	}
	fi, err := root.Lstat(name)
	if err != nil {
		return notVersion(err.Error())
	}
	if !fi.IsDir() {
		return notVersion("not a directory")
	}
	fi, err = root.Lstat(filepath.Join(name, Executable))
	switch {
	case err != nil:
		return notVersion("no " + Executable)
	case !fi.Mode().IsRegular():
		return notVersion(Executable + " is not a regular file")
	case fi.Mode().Perm()&0o111 == 0:
		return notVersion(Executable + " is not executable")
	}
	marker := filepath.Join(name, ArrivedFile)
	fi, err = root.Lstat(marker)
	if err != nil || !fi.Mode().IsRegular() {
		return notVersion("no arrival marker: not delivered whole")
	}
	f, err := root.Open(marker)
	if err != nil {
		return notVersion(err.Error())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxMarker))
	f.Close()
	if err != nil {
		return notVersion(err.Error())
	}
	arrived, counter, err := ParseArrival(b)
	if err != nil {
		return notVersion(err.Error())
	}
	return Version{Name: name, Counter: counter, Arrived: arrived, Dir: filepath.Join(dir, name)}, nil
}

// Newest returns the version in dir with the greatest arrival counter; ok
// is false when dir holds none.
func Newest(dir string) (v Version, ok bool, err error) {
	vs, err := List(dir)
	if err != nil || len(vs) == 0 {
		return Version{}, false, err
	}
	return vs[len(vs)-1], true, nil
}

// Pick is the launcher's choice among vs (as List orders them): the newest,
// unless it is the version the launcher rolled back from (bad), in which
// case the known-good version when it is among vs. ok is false when vs is
// empty. The host stands aside exactly when Pick names a version that
// arrived after the running one, so the two never disagree about what
// should run.
func Pick(vs []Version, knownGood, bad string) (v Version, ok bool) {
	if len(vs) == 0 {
		return Version{}, false
	}
	newest := vs[len(vs)-1]
	if bad != "" && newest.Name == bad && knownGood != "" {
		if i := slices.IndexFunc(vs, func(v Version) bool { return v.Name == knownGood }); i >= 0 {
			return vs[i], true
		}
	}
	return newest, true
}

// Running says which version the process whose executable is exe is: the
// version directory exe is in, when that directory is in dir and is a
// version. managed is false, with no error, when exe is elsewhere (a build
// directory, `go run`): the process is not a managed version. exe should
// be the resolved path (Self.Path); dir is resolved here. An exe inside dir
// whose directory is not a version (half-delivered, renamed by hand) is
// not managed either, and the error says why.
func Running(exe, dir string) (v Version, managed bool, err error) {
	if filepath.Base(exe) != Executable {
		return Version{}, false, nil
	}
	rdir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return Version{}, false, nil // no versions directory: nothing is managed
	}
	vdir := filepath.Dir(exe)
	if filepath.Dir(vdir) != rdir {
		return Version{}, false, nil
	}
	v, err = Lookup(rdir, filepath.Base(vdir))
	if err != nil {
		return Version{}, false, err
	}
	return v, true, nil
}
