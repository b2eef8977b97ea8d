package upgrade

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Self is the running process's executable as it was when the process
// started: where it is, and which file it was. Resolve it once, first thing,
// and ask Replaced later.
type Self struct {
	// Path is the executable's absolute path, symlinks resolved.
	Path string
	// image is the file the process runs, stat'ed at Resolve.
	image fs.FileInfo
}

// Resolve finds the running executable (os.Executable, which on Linux reads
// /proc/self/exe) and records which file it is.
func Resolve() (*Self, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	image, err := os.Stat(procExe())
	if err != nil {
		image, err = os.Stat(exe)
	}
	if err != nil {
		return nil, fmt.Errorf("stat own executable: %w", err)
	}
	return &Self{Path: exe, image: image}, nil
}

// procExe is the link to the running image where the system has one.
func procExe() string {
	if runtime.GOOS == "linux" {
		return "/proc/self/exe"
	}
	return ""
}

// Replaced reports whether the executable the process started from is no
// longer what is at Path: deleted (Linux shows /proc/self/exe as
// "PATH (deleted)"), another file renamed over it (another inode), or the
// file written in place (its size or modification time changed). why says
// which, for the journal.
func (s *Self) Replaced() (replaced bool, why string, err error) {
	if p := procExe(); p != "" {
		if link, err := os.Readlink(p); err == nil && link != s.Path && strings.HasSuffix(link, " (deleted)") {
			return true, fmt.Sprintf("the executable %s was deleted or replaced (the kernel shows %q)", s.Path, link), nil
		}
	}
	now, err := os.Stat(s.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return true, fmt.Sprintf("the executable %s is gone", s.Path), nil
	case err != nil:
		return false, "", fmt.Errorf("stat own executable: %w", err)
	case !os.SameFile(now, s.image):
		return true, fmt.Sprintf("the executable %s was replaced by another file", s.Path), nil
	case now.Size() != s.image.Size() || !now.ModTime().Equal(s.image.ModTime()):
		return true, fmt.Sprintf("the executable %s was written over (size %d to %d, modified %s)",
			s.Path, s.image.Size(), now.Size(), now.ModTime().UTC().Format("2006-01-02T15:04:05.000000000Z07:00")), nil
	}
	return false, "", nil
}
