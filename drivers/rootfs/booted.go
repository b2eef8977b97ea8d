package rootfs

import "os"

// Booted is sd_booted(3) for the root: whether a service manager runs
// it. Only "/" can be run by the machine's own manager; a root prefix
// elsewhere has none.
func (r *Root) Booted() bool {
	if r.Dir() != "/" {
		return false
	}
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}
