package link

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/nats-io/nats.go"
)

// connectTimeout bounds one TCP connect: nats.go's default, which a
// custom dialer replaces.
const connectTimeout = nats.DefaultTimeout

// dialer connects the link's TCP connections with the kernel watching
// them: keepalives while idle, and a bound on how long sent data may go
// unacknowledged (TCP_USER_TIMEOUT), so that a dead path ends the
// connection and the link reconnects.
func dialer() *net.Dialer {
	return &net.Dialer{
		Timeout: connectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable:   true,
			Idle:     keepAliveIdle,
			Interval: keepAliveInterval,
			Count:    keepAliveCount,
		},
		Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			if cerr := c.Control(func(fd uintptr) {
				err = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(userTimeout.Milliseconds()))
			}); cerr != nil {
				return cerr
			}
			return err
		},
	}
}
