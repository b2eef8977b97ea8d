package account

import (
	"context"

	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// HoldLock takes the lock the drivers take, for the tests.
func HoldLock(ctx context.Context, root *rootfs.Root) (unlock func(), err error) {
	return lockFile(ctx, root, DefaultLockTimeout)
}
