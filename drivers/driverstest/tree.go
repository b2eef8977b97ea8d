package driverstest

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Tree is a Snapshot for drivers that manage files: one line for each entry
// under dir, with its path relative to dir, its type, mode (with the setuid,
// setgid and sticky bits), owner and group, and the SHA-256 of a regular
// file's content or a symlink's target. It leaves out times, so two
// listings of the same tree are equal. Symlinks are listed, not followed.
func Tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		var what string
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			what = fmt.Sprintf("file sha256:%x", sha256.Sum256(data))
		case syscall.S_IFDIR:
			what = "dir"
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			what = fmt.Sprintf("symlink sha256:%x", sha256.Sum256([]byte(target)))
		default:
			what = fmt.Sprintf("type %#o", st.Mode&syscall.S_IFMT)
		}
		fmt.Fprintf(&b, "%s %04o %d:%d %s\n", filepath.ToSlash(rel), st.Mode&0o7777, st.Uid, st.Gid, what)
		return nil
	})
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return b.String()
}
