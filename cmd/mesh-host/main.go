// Command mesh-host is the node agent: the root service that holds a machine
// in the state its mesh declares, and the commands a person uses to ask it
// what changed and why. This package is the kong grammar and the wiring;
// the work is in the packages it wires together.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/completion"
	"github.com/mesh-host/mesh-host/cmd/internal/termsafe"
	"github.com/mesh-host/mesh-host/cmd/internal/tuning"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/upgrade"
)

// version is the running binary's version, set at link time
// (-ldflags "-X main.version=...").
var version = "dev"

// heapReturner is the process's one tuning.HeapReturner, made by main
// (and by the beds' many-hosts runner, which runs many services in one
// process) before any command runs; the service is handed its Request.
// Nil where a test runs commands itself: nothing is returned.
var heapReturner *tuning.HeapReturner

func main() {
	// The service sets its own pace (serveCmd.Run).
	tuning.ShortCommand()
	heapReturner = tuning.NewHeapReturner()
	os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes of mesh-host's own, beside command.ExitOK, ExitFailed and
// ExitRefused.
const (
	exitDamaged = upgrade.DamagedStatus // the journal is damaged (see damage.go); plan's 3 is exitPending
)

// cli is the grammar. Global flags say where the host keeps its state.
type cli struct {
	ShowVersion command.VersionFlag `name:"version" group:"global" help:"Print this binary's version and its digest, and exit."`

	StateDir string `group:"global" name:"state-dir" env:"MESH_HOST_STATE_DIR" default:"/var/lib/mesh-host" help:"Directory of the journal and the service's socket."`
	Journal  string `group:"global" name:"journal" env:"MESH_HOST_JOURNAL" help:"Journal file to open directly, never through the service (default: STATE-DIR/journal.db)."`
	Socket   string `group:"global" name:"socket" env:"MESH_HOST_SOCKET" help:"The running service's socket (default: STATE-DIR/control.sock)."`
	Root     string `group:"global" name:"root" env:"MESH_HOST_ROOT" default:"/" type:"path" help:"The root prefix the host manages: / on a node, a sandbox directory in tests and demos."`
	Versions string `group:"global" name:"versions" default:"${versions_dir}" help:"Directory of the host's own versions, under --root: VERSIONS/NAME/mesh-host, delivered as archives. Archives there outlive the declaration that delivered them until the host retires them."`
	OwnUnit  string `group:"global" name:"own-unit" default:"mesh-host.service" help:"The host's own unit, which no declaration may name."`
	Parallel int    `group:"global" name:"parallel" default:"8" help:"How many resources to observe or apply at once."`

	Apply      applyCmd           `cmd:"" help:"Apply a declaration to this machine now."`
	Plan       planCmd            `cmd:"" help:"Show what applying a declaration would change; change nothing."`
	Check      checkCmd           `cmd:"" help:"Look for drift in what the host owns, journal it, and repair it."`
	JournalCmd journalCmd         `cmd:"" name:"journal" help:"Show what changed on this machine, and why."`
	Replay     replayCmd          `cmd:"" help:"Rebuild the state from the journal's first record, to check it or to look at the past."`
	Status     statusCmd          `cmd:"" help:"Show the host's current state."`
	Serve      serveCmd           `cmd:"" help:"Run the host service."`
	Enrol      enrolCmd           `cmd:"" help:"Join a mesh with the token 'meshctl enrol' printed: write the link's configuration and credentials."`
	Version    command.Version    `cmd:"" help:"Print this binary's version."`
	Completion command.Completion `cmd:"" help:"Print the script that completes this command in a shell: eval \"$(mesh-host completion bash)\"."`
}

func (c *cli) journalPath() string {
	if c.Journal != "" {
		return c.Journal
	}
	return filepath.Join(c.StateDir, "journal.db")
}

func (c *cli) socketPath() string {
	if c.Socket != "" {
		return c.Socket
	}
	return filepath.Join(c.StateDir, "control.sock")
}

// env is what every command is handed: its streams, its clock, and, when it
// runs inside the service on behalf of a client, the service's journal.
type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
	now            func() time.Time
	args           []string
	cli            *cli
	held           *service.Held // non-nil inside the service
	// verified is the stored state read when the journal was opened and
	// verified, until storedState takes it.
	verified *verifiedState
	// redact holds the secret values opened for the reconcile, which the
	// drivers redact from what they show (redactor).
	redact *redactor
}

// failed is the command's failure, or, when one of a's errors is damage to
// the journal, its stop on damage (exitDamaged): every command reports
// damage the same way without each one looking for it.
func failed(format string, a ...any) error {
	err := fmt.Errorf(format, a...)
	for _, v := range a {
		if e, ok := v.(error); ok && hostjournal.IsDamage(e) {
			return damageStop(err)
		}
	}
	return &command.ExitError{Code: command.ExitFailed, Err: err}
}

// Main runs the mesh-host command line and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// What nodes and declarations wrote reaches the terminal escaped.
	return runCLI(ctx, args, termsafe.Writer(stdout), termsafe.Writer(stderr), nil)
}

// runCLI parses and runs args. held is the service's journal when the service
// runs a command for a client over its socket, else nil.
func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer, held *service.Held) (code int) {
	var c cli
	defer command.RecoverExit(&code)
	parser, err := command.NewParser(&c, "mesh-host",
		"The node agent of a mesh: holds this machine in its declared state and remembers every change and its cause.",
		stdout, stderr, kong.Vars{"versions_dir": upgrade.DefaultVersionsDir, "version": version})
	if err != nil {
		return command.Finish(stderr, "mesh-host", err, command.ExitRefused)
	}
	if held == nil { // a shell asking for completions; never a client's command line
		completion.Answer(parser)
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		return command.Finish(stderr, "mesh-host", err, command.ExitRefused)
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr, now: time.Now, args: args, cli: &c, held: held}
	err = kctx.Run(e)
	fallback := command.ExitFailed
	if hostjournal.IsDamage(err) {
		fallback = exitDamaged
	}
	return command.Finish(stderr, "mesh-host", err, fallback)
}
