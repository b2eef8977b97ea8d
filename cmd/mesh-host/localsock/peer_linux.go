package localsock

import (
	"fmt"
	"net"
	"os"
	"syscall"
)

// checkPeer admits root and the service's own user, nobody else, and
// returns the peer's uid (known false when the connection cannot say).
func checkPeer(c net.Conn) (uid uint32, known bool, err error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false, nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, false, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, false, err
	}
	if credErr != nil {
		return 0, false, fmt.Errorf("read peer credentials: %w", credErr)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Getuid() {
		return 0, false, fmt.Errorf("uid %d may not use this socket: root only", cred.Uid)
	}
	return cred.Uid, true, nil
}
