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
