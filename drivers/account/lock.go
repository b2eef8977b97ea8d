package account

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// lockFile locks /etc/.pwd.lock beneath the root for writing, as
// lckpwdf(3) does (opened O_CREAT|O_WRONLY, mode 0600, the whole file
// write-locked with fcntl), and returns what unlocks it.
//
// The lock is an open file description lock (F_OFD_SETLK), not the
// process-owned lock lckpwdf takes. The two kinds conflict with each
// other, so a useradd waits for the host and the host for it; but a
// process-owned lock is the process's, so two goroutines of the host
// would both get it, while an open file description lock is the
// descriptor's: every call opens its own, and the host's own edits, from
// one driver or from Users and Groups alike, wait for each other as they
// wait for useradd.
//
// lckpwdf bounds its wait with alarm(2), a signal to the whole process;
// here the lock is tried and tried again instead, until it is free,
// timeout passes (ErrLocked) or ctx ends.
func lockFile(ctx context.Context, root *rootfs.Root, timeout time.Duration) (unlock func(), err error) {
	dir, err := root.OpenDir("/etc")
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", lockPath, err)
	}
	defer dir.Close()
	// O_NOFOLLOW: a symlink planted at the lock is refused, not followed
	// to make a file elsewhere. O_NONBLOCK: a fifo planted there does not
	// hang the open.
	fd, err := unix.Openat(int(dir.Fd()), ".pwd.lock", unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("lock %s: %w: a symlink is there; the host never follows one", lockPath, drivers.ErrUnsafePath)
		}
		return nil, fmt.Errorf("lock %s: %w", root.Host(lockPath), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", root.Host(lockPath), err)
		}
		return nil, fmt.Errorf("lock %s: %w: a %s is there, not a file", lockPath, drivers.ErrUnsafePath, rootfs.FileType(st.Mode))
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	deadline := time.Now().Add(timeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 10*time.Millisecond) {
		err := unix.FcntlFlock(uintptr(fd), unix.F_OFD_SETLK, &lk)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EINTR) {
			unix.Close(fd)
			return nil, fmt.Errorf("lock %s: %w", root.Host(lockPath), err)
		}
		if time.Now().After(deadline) {
			unix.Close(fd)
			return nil, fmt.Errorf("%w: %s is still locked after %s (a useradd, vipw or passwd at work?)", ErrLocked, root.Host(lockPath), timeout)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			unix.Close(fd)
			return nil, fmt.Errorf("lock %s: %w", lockPath, context.Cause(ctx))
		case <-t.C:
		}
	}
	// Closing the descriptor, its only one, releases the lock.
	return func() { unix.Close(fd) }, nil
}
