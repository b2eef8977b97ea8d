package rootfs

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// errNoOpenat2 says the kernel (older than 5.6, or a sandbox that filters
// it) has no openat2: walk the path instead.
var errNoOpenat2 = errors.New("openat2 unavailable")

var noOpenat2 atomic.Bool

// openBeneath opens rel beneath dirfd following no symlink at all and never
// leaving dirfd, in one system call.
func openBeneath(dirfd int, rel string, flags int) (int, error) {
	if noOpenat2.Load() {
		return -1, errNoOpenat2
	}
	fd, err := unix.Openat2(dirfd, rel, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
		noOpenat2.Store(true)
		return -1, errNoOpenat2
	}
	return fd, err
}

// oPath opens a file only to look at it.
const oPath = unix.O_PATH
