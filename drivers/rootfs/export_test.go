package rootfs

import "time"

// MaxHeldDirs is maxHeldDirs, for the tests.
const MaxHeldDirs = maxHeldDirs

// ShareHeldFor sets how long r shares a held directory with files staged
// later.
func ShareHeldFor(r *Root, d time.Duration) { r.shareHeldFor = d }

// StageNamed makes r stage every file under a temporary name, as on a
// filesystem without O_TMPFILE.
func StageNamed(r *Root) { r.noUnnamed = true }

// Unnamed is how many files r holds staged without a name.
func Unnamed(r *Root) int {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	return r.unnamed
}
