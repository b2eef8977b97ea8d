package drivers

// MaxHeldDirs is maxHeldDirs, for the tests.
const MaxHeldDirs = maxHeldDirs
