//go:build !linux

package rootfs

import "errors"

// errNoOpenat2 says there is no openat2 here: walk the path instead.
var errNoOpenat2 = errors.New("openat2 unavailable")

func openBeneath(int, string, int) (int, error) { return -1, errNoOpenat2 }

// oPath is unused where there is no openat2.
const oPath = 0
