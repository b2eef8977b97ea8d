package upgrade

import _ "embed"

// Launcher is the launcher script (launcher.sh): the service's main
// process, which starts the newest version, rolls back once to the
// known-good one and halts with HaltStatus when that fails too. Packaging
// installs it; its header comment is its manual.
//
//go:embed launcher.sh
var Launcher []byte
