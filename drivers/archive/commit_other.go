//go:build !linux

package archive

import (
	"os"

	"golang.org/x/sys/unix"
)

// commit renames stage in dirfd to base, an existing base aside first;
// old is then the old tree's name, for the caller to remove. There is a
// moment with nothing at base: this system has no renameat2.
func commit(dirfd int, stage, base string) (old string, err error) {
	return renameAside(dirfd, stage, base)
}

// syncFS flushes every filesystem: there is no per-filesystem call here.
func syncFS(*os.File) error {
	unix.Sync()
	return nil
}
