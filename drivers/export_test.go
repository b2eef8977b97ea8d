package drivers

import "time"

// MaxHeldDirs is maxHeldDirs, for the tests.
const MaxHeldDirs = maxHeldDirs

// ShareHeldFor sets shareHeldFor for the rest of the test.
func ShareHeldFor(t interface{ Cleanup(func()) }, d time.Duration) {
	was := shareHeldFor
	shareHeldFor = d
	t.Cleanup(func() { shareHeldFor = was })
}

// StageNamed makes r stage every file under a temporary name, as on a
// filesystem without O_TMPFILE.
func StageNamed(r *Root) { r.noUnnamed = true }

// Unnamed is how many files r holds staged without a name.
func Unnamed(r *Root) int {
	r.heldMu.Lock()
	defer r.heldMu.Unlock()
	return r.unnamed
}
