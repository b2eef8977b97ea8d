package tuning

import (
	"os"
	"runtime/debug"
)

// The collector's pace (GOGC) for each kind of process.
const (
	// shortCommandGC is for a command that allocates a projection and
	// exits: collecting garbage four times less often is most of a no-op
	// check's spare time.
	shortCommandGC = 400
	// pacedGC is Go's default, for a host service living beside the
	// machine's workload, and for a command once its declaration is large
	// (PaceForDocument).
	pacedGC = 100
	// controlServiceGC is for `meshctl serve`, which holds, for every
	// connected node, the broker's client, its TLS state and its
	// goroutines' stacks: at Go's default the heap may grow to twice what
	// is live before a collection; at half, some 15 % less memory a node
	// for the same CPU (docs/fleet.md).
	controlServiceGC = 50
)

// largeDocument is the size of a declaration's document, as JSON or as
// written (some 3,000 files), past which a short command's heap is large:
// its parse and its reconcile hold a few kilobytes a resource, and
// shortCommandGC lets the heap grow to five times that before collecting.
// Past it, Go's default pace takes a third off an apply's memory in the
// same time (docs/architecture.md).
const largeDocument = 256 << 10

// ShortCommand paces the collector for a command that runs and exits.
func ShortCommand() { debug.SetGCPercent(shortCommandGC) }

// PaceForDocument sets the default pace for the rest of the process once a
// declaration of size bytes is about to be read. It is only ever lowered:
// a service that has reconciled a large declaration keeps the default.
func PaceForDocument(size int64) {
	if size > largeDocument {
		debug.SetGCPercent(pacedGC)
	}
}

// HostService paces the collector for `mesh-host serve`.
func HostService() { debug.SetGCPercent(pacedGC) }

// ControlService paces the collector for `meshctl serve`, unless the
// operator set GOGC.
func ControlService() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(controlServiceGC)
	}
}
