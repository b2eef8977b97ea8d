package account

import (
	"context"

	"github.com/mesh-host/mesh-host/drivers"
)

// HoldLock takes the lock the drivers take, for the tests.
func HoldLock(ctx context.Context, root *drivers.Root) (unlock func(), err error) {
	return lockFile(ctx, root, DefaultLockTimeout)
}
