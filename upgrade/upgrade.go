// Package upgrade is the host's side of versions living side by side: which
// versions are on disk and which is the newest, which version the running
// process is and whether its executable was replaced, the known-good
// record, the retirement of old versions, the launcher's state files, and
// the launcher script itself.
//
// It is not the delivery (an ordinary archive resource delivers a version)
// nor the decision to stand aside or confirm (the service decides, between
// reconciles); it imports nothing of this module, so the script and the
// host read the same files by the same rules.
//
// # The layout
//
// A version is a directory VERSIONS/NAME holding the executable
// VERSIONS/NAME/mesh-host (Executable) and the arrival marker
// VERSIONS/NAME/.mesh-host-arrived (ArrivedFile) the archive driver writes
// last: one line, "TIME COUNTER", the arrival time in RFC 3339 UTC and a
// decimal counter one more than any sibling's. VERSIONS is
// DefaultVersionsDir on a node (under the host's root prefix). NAME is the
// artifact's digest hex, or whatever name the archive path gave; validName
// says which names count.
//
// A directory whose marker is missing or not "TIME COUNTER" (a counter of
// 1 to 18 digits), or whose mesh-host is missing, not a regular file or not
// executable, is not a version: it is half-delivered, and List, Newest,
// Retire and the launcher all ignore it. So are symlinks and names starting
// with "." (the archive driver's staging directories, retiring ones).
//
// # The newest
//
// The newest version is the one with the greatest arrival counter: the one
// that arrived last, whatever the names and the clock say. Ties (which the
// archive driver never makes) go to the name that sorts first bytewise. The
// launcher script applies the same rule to the same files.
//
// # The state directory
//
//	STATE-DIR/known-good         the confirmed version's name, one line
//	STATE-DIR/launcher/failures  "VERSION COUNT": consecutive failed starts
//	STATE-DIR/launcher/bad       "VERSION EXIT-CODE": rolled back from; not
//	                             started again while it is the newest
//	STATE-DIR/launcher/decision  one line per launcher decision,
//	                             "rolled-back FROM TO EXIT-CODE REASON..."
//	                             or "halted FAILED OTHER EXIT-CODE MESSAGE...",
//	                             journaled by the host's next start, which
//	                             then removes the file
//
// All of them are plain text a shell reads with `read`, and all survive a
// reboot. The known-good record is written by the host only; the launcher
// files by the launcher, except that the host removes decision (after
// journaling it) and failures (a start that completed a reconcile is not a
// failed start).
package upgrade

import "errors"

// The layout of a version directory. The archive driver writes ArrivedFile
// (drivers/archive.ArrivedFile; a test checks they agree).
const (
	// DefaultVersionsDir is where versions live on a node, under the
	// host's root prefix. A release's archive resource names
	// DefaultVersionsDir + "/${version}".
	DefaultVersionsDir = "/opt/mesh-host/versions"
	// Executable is the host's executable inside a version directory.
	Executable = "mesh-host"
	// ArrivedFile is the arrival marker inside a version directory.
	ArrivedFile = ".mesh-host-arrived"
	// RetiringPrefix names a version directory being removed:
	// ".retiring-NAME". It is not a version, and Sweep removes leftovers.
	RetiringPrefix = ".retiring-"
)

// Files under the state directory (see the package doc).
const (
	// KnownGoodFile is STATE-DIR/known-good.
	KnownGoodFile = "known-good"
	// LauncherDir is STATE-DIR/launcher, the launcher's own state.
	LauncherDir = "launcher"
	// FailuresFile is LauncherDir/failures: "VERSION COUNT".
	FailuresFile = "failures"
	// BadFile is LauncherDir/bad: "VERSION EXIT-CODE".
	BadFile = "bad"
	// DecisionFile is LauncherDir/decision: one decision a line.
	DecisionFile = "decision"
)

// The launcher's settings and exit statuses.
const (
	// HaltStatus is the launcher's exit status when it halts: the
	// known-good version failed too, or the only version failed at the
	// limit, so the machine and not the binary is the problem. The unit
	// lists it in RestartPreventExitStatus=. It is EX_CONFIG of
	// sysexits.h.
	HaltStatus = 78
	// DamagedStatus is the host's exit status when its journal is
	// damaged. The version is not at fault, so the launcher halts at once
	// on it: no retry, no rollback to a version that would meet the same
	// journal (and, older, might not read its checksums).
	DamagedStatus = 4
	// DefaultFailureLimit is how many consecutive failed starts of a
	// version the launcher allows before it rolls back
	// (MESH_HOST_FAILURE_LIMIT).
	DefaultFailureLimit = 3
	// DefaultStateDir is the launcher's MESH_HOST_STATE_DIR default, the
	// host's --state-dir default.
	DefaultStateDir = "/var/lib/mesh-host"
)

// Decision verbs of the launcher's decision file.
const (
	// VerbRolledBack: "rolled-back FROM TO EXIT-CODE REASON...".
	VerbRolledBack = "rolled-back"
	// VerbHalted: "halted FAILED OTHER EXIT-CODE MESSAGE...": FAILED is
	// the version whose failure halted the launcher, OTHER the one rolled
	// back from before it (FAILED again when there was none).
	VerbHalted = "halted"
)

// Errors of this package.
var (
	// ErrNotVersion is returned when a name is not a version in the
	// directory: absent, half-delivered (no valid arrival marker, no
	// executable mesh-host), a symlink, or not a validName.
	ErrNotVersion = errors.New("not a version")
	// ErrBadMarker is returned by ParseArrival for a marker that is not
	// "TIME COUNTER".
	ErrBadMarker = errors.New("invalid arrival marker")
	// ErrBadRecord is returned for a state file (known-good, failures,
	// bad, decision) whose content does not parse; the error names the
	// file and the line.
	ErrBadRecord = errors.New("invalid record")
)
