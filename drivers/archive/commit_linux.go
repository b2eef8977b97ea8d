package archive

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// commit renames stage in dirfd to base. An existing base is swapped with
// stage in one step, so a reader sees the old tree or the new; old is then
// the old tree's name, for the caller to remove. A filesystem without
// renameat2 gets renameAside.
func commit(dirfd int, stage, base string) (old string, err error) {
	err = unix.Renameat2(dirfd, stage, dirfd, base, unix.RENAME_NOREPLACE)
	if err == nil {
		return "", nil
	}
	if errors.Is(err, unix.EEXIST) {
		if err = unix.Renameat2(dirfd, stage, dirfd, base, unix.RENAME_EXCHANGE); err == nil {
			return stage, nil
		}
	}
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return renameAside(dirfd, stage, base)
	}
	return "", fmt.Errorf("rename into place: %w", err)
}

// syncFS flushes the one filesystem holding d.
func syncFS(d *os.File) error { return unix.Syncfs(int(d.Fd())) }
