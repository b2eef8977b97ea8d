package link

import (
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// tcpWatch is what the kernel was told to watch a TCP socket by.
type tcpWatch struct {
	keepAlive, idle, interval, count, userTimeout int
}

// clientSockets returns the watch of every socket of this process
// connected to port on the loopback.
func clientSockets(t *testing.T, port int) []tcpWatch {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd to find the link's socket by: %v", err)
	}
	var out []tcpWatch
	for _, e := range fds {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		peer, err := unix.Getpeername(fd)
		if err != nil {
			continue
		}
		in4, ok := peer.(*unix.SockaddrInet4)
		if !ok || in4.Port != port {
			continue
		}
		get := func(level, opt int) int {
			v, err := unix.GetsockoptInt(fd, level, opt)
			if err != nil {
				t.Fatalf("getsockopt on fd %d: %v", fd, err)
			}
			return v
		}
		out = append(out, tcpWatch{
			keepAlive:   get(unix.SOL_SOCKET, unix.SO_KEEPALIVE),
			idle:        get(unix.IPPROTO_TCP, unix.TCP_KEEPIDLE),
			interval:    get(unix.IPPROTO_TCP, unix.TCP_KEEPINTVL),
			count:       get(unix.IPPROTO_TCP, unix.TCP_KEEPCNT),
			userTimeout: get(unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT),
		})
	}
	return out
}

// The link's connection is watched by the kernel, so that a path that
// died silently ends it without the broker's process doing anything:
// keepalives after 10 s idle, 4 of them 5 s apart, and 30 s for sent data
// to be acknowledged. The bed's own client (Go's defaults) is the
// control: it has no user timeout.
func TestLinkSocketIsWatchedByTheKernel(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	want := tcpWatch{
		keepAlive:   1,
		idle:        int(keepAliveIdle / time.Second),
		interval:    int(keepAliveInterval / time.Second),
		count:       keepAliveCount,
		userTimeout: int(userTimeout / time.Millisecond),
	}
	socks := clientSockets(t, serverPort(t, b.srv))
	if len(socks) != 2 {
		t.Fatalf("%d sockets connected to the broker, want the link's and the bed's: %+v", len(socks), socks)
	}
	watched := 0
	for _, s := range socks {
		if s == want {
			watched++
		}
	}
	if watched != 1 {
		t.Errorf("sockets to the broker %+v: want exactly one (the link's) watched as %+v", socks, want)
	}
}
