package rootfs

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the one filesystem holding d.
func syncFS(d *os.File) error { return unix.Syncfs(int(d.Fd())) }
