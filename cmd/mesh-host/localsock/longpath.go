package localsock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// maxSunPath is what a socket address holds of a path (sun_path, with its
// terminating NUL): a longer path fails to bind or connect with EINVAL.
const maxSunPath = 108

// withShortPath calls fn with an address that names path: path itself
// when it fits a socket address, else the same file reached through an
// open descriptor of its directory (/proc/self/fd/N/NAME), which does. A
// state directory deep in a sandbox or a CI workspace is no reason for
// the service not to listen, or the CLI not to find it.
func withShortPath(path string, fn func(addr string) error) error {
	if len(path) < maxSunPath {
		return fn(path)
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: filepath.Dir(path), Err: err}
	}
	defer unix.Close(fd)
	addr := fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path))
	if len(addr) >= maxSunPath {
		return fmt.Errorf("socket name %q is too long for a socket address", filepath.Base(path))
	}
	return fn(addr)
}

// unlinkingListener removes its socket by its real path when closed: the
// address it was bound at named a descriptor that is closed by then, and
// may name another directory.
type unlinkingListener struct {
	net.Listener
	path   string
	unlink sync.Once // a second Close must not remove a successor's socket
}

// Close unlinks before it closes, as net.UnixListener does: Accept
// returns as soon as the descriptor closes, and whoever waits on it sees
// the socket gone.
func (l *unlinkingListener) Close() error {
	l.unlink.Do(func() { _ = os.Remove(l.path) })
	return l.Listener.Close()
}
