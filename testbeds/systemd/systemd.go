// Package systemd boots Debian machines with systemd as their PID 1, in
// systemd-nspawn containers on this machine, for the tests that need a real
// service manager: mesh-host installed from its own package and run by its
// unit, the launcher's restarts and rollbacks as systemd sees them, the
// drivers' live tests against a running manager. Every container boots one
// cached, debootstrapped tree (Tree) through an overlay of its own
// (--volatile=overlay), so it is up in about a second and leaves the tree
// as it found it.
//
// It needs root, debootstrap and systemd-nspawn; without them a test is
// skipped, naming what to install. It is not a container runtime: one
// distribution, the machine's network unless told otherwise, no resource
// limits, and nothing here is meant for a machine that is not a test's.
package systemd

import (
	"errors"
	"os"
	"os/exec"

	"github.com/mesh-host/mesh-host/testbeds"
)

// TB is what the package needs of a test (testing.TB has it all), so that
// it does not import testing: a bed's TB, and skipping.
type TB interface {
	testbeds.TB
	Errorf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Errors a caller may tell apart.
var (
	// ErrNoPackage is returned by CompileTests for a package that does
	// not exist (yet).
	ErrNoPackage = errors.New("no such package")
	// ErrNoTests is returned by CompileTests for a package without test
	// files.
	ErrNoTests = errors.New("no test files")
)

// Require skips the test unless this machine can build the tree and boot
// it: root, debootstrap, systemd-nspawn, and the util-linux and coreutils
// tools the package drives (nsenter, chroot).
func Require(tb TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("needs root: debootstrap and systemd-nspawn make and boot machines")
	}
	for _, tool := range []string{"debootstrap", "systemd-nspawn"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("no %s here: needs debootstrap and systemd-nspawn (apt-get install debootstrap systemd-container)", tool)
		}
	}
	for _, tool := range []string{"nsenter", "chroot"} {
		if _, err := exec.LookPath(tool); err != nil {
			tb.Skipf("no %s here: needs util-linux and coreutils", tool)
		}
	}
}
