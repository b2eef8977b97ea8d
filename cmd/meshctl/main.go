// Command meshctl is the control plane's end of a mesh: the control service
// (with an embedded NATS broker when no cluster is given) and the
// operator's commands: create the authority, enrol nodes, declare what a
// node should be, and see what nodes report. This package is the kong
// grammar and the wiring; the work is in package client.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/nats-io/nats.go"
	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/completion"
	"github.com/mesh-host/mesh-host/cmd/internal/termsafe"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
)

// version is the running binary's version, set at link time
// (-ldflags "-X main.version=...").
var version = "dev"

func main() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }

// cli is the grammar. Global flags say where the authority lives and which
// broker to talk to.
type cli struct {
	ShowVersion command.VersionFlag `name:"version" group:"global" help:"Print this binary's version and its digest, and exit."`

	Data     string   `group:"global" name:"data" env:"MESHCTL_DATA" default:"/var/lib/meshctl" type:"path" help:"Directory of the authority: keys, credentials and control.json."`
	NATS     []string `group:"global" name:"nats" env:"MESHCTL_NATS" placeholder:"URL" help:"Broker address(es) (default: those control.json records). serve: use this broker instead of embedding one."`
	Operator string   `group:"global" name:"operator" env:"MESHCTL_OPERATOR" placeholder:"NAME" help:"Who is declaring: signed into every declaration and shown by the nodes' journals (default: USER@HOSTNAME)."`

	Init       initCmd            `cmd:"" help:"Create the authority of a mesh in the data directory (once; later runs reuse it)."`
	Enrol      enrolCmd           `cmd:"" help:"Print an enrolment token for a node: signed, short-lived, redeemed once by mesh-host enrol for credentials signed for a key the node makes."`
	Revoke     revokeCmd          `cmd:"" help:"End a node's access at once: the broker closes its connection and refuses its credentials."`
	Node       nodeCmd            `cmd:"" help:"Act on a node as a whole: node rm NODE."`
	Label      labelCmd           `cmd:"" help:"Show or change a node's labels (key=value, key- to remove), which --select chooses nodes by."`
	Serve      serveCmd           `cmd:"" help:"Run the control service (and, without --nats, an embedded broker)."`
	NATSConfig natsConfigCmd      `cmd:"" name:"nats-config" help:"Print the configuration an existing NATS server includes to trust this authority."`
	Declare    declareCmd         `cmd:"" help:"Store a node's declaration and push it to the node."`
	Profile    profileCmd         `cmd:"" help:"Keep the fleet's profiles: declarations without a node, composed into each node's by label."`
	Render     renderCmd          `cmd:"" help:"Print the declaration the profiles make for a node."`
	Diff       diffCmd            `cmd:"" help:"Print, for each node selected, how what the profiles make differs from what it has."`
	Rollout    rolloutCmd         `cmd:"" help:"Push what the profiles render to the nodes a selector chooses, in waves that halt on failure; status, pause, resume, abort."`
	Plan       planCmd            `cmd:"" help:"Ask the selected nodes what their next declaration would change on their machines; change nothing."`
	Nodes      nodesCmd           `cmd:"" help:"Show every node: what it reports and what is declared for it."`
	Status     statusCmd          `cmd:"" help:"Show a node's state as it last reported it: what mesh-host status shows on the node."`
	Replay     replayCmd          `cmd:"" help:"Rebuild a node's state from its records in the events stream; --verify compares it with what the node reported."`
	JournalCmd journalCmd         `cmd:"" name:"journal" help:"Show a node's journal as the events stream holds it."`
	Release    releaseCmd         `cmd:"" help:"Deliver a host build to nodes: store it, serve it, and declare it as each node's next host version."`
	Web        webCmd             `cmd:"" help:"The web view of meshctl serve --http-listen: web token prints an operator's token."`
	Secret     secretCmd          `cmd:"" help:"Keep the values of secrets that declarations name (content: {secret: NAME}); each is sealed to its node when declared."`
	Version    command.Version    `cmd:"" help:"Print this binary's version."`
	Completion command.Completion `cmd:"" help:"Print the script that completes this command in a shell: eval \"$(meshctl completion bash)\"."`
}

// env is what every command is handed.
type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
	// terminal is stdout when it is a terminal, for a progress bar drawn
	// in place; nil otherwise (and in tests), when progress is plain
	// lines.
	terminal io.Writer
	now      func() time.Time
	cli      *cli
}

func failed(format string, a ...any) error {
	return &command.ExitError{Code: command.ExitFailed, Err: fmt.Errorf(format, a...)}
}

// classify gives err the exit code its kind calls for: input the mesh
// refuses is 2, anything else that went wrong is 1.
func classify(err error) error {
	var ee *command.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee):
		// kong may wrap what a command returned.
		return ee
	case errors.Is(err, client.ErrRefused), errors.Is(err, authority.ErrMeshMismatch), errors.Is(err, authority.ErrCAMismatch),
		errors.Is(err, linkproto.ErrInvalidName), errors.Is(err, declaration.ErrInvalid):
		return &command.ExitError{Code: command.ExitRefused, Err: err}
	}
	return &command.ExitError{Code: command.ExitFailed, Err: err}
}

// Main runs the meshctl command line and returns its exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// What nodes and declarations wrote reaches the terminal escaped.
	return runCLI(ctx, args, termsafe.Writer(stdout), termsafe.Writer(stderr), terminal(stdout))
}

// terminal is w when it is a terminal, else nil.
func terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return nil
	}
	return f
}

// runCLI parses and runs args until ctx ends (serve) or the command is done.
// term, when not nil, is the terminal stdout writes to, unfiltered.
func runCLI(ctx context.Context, args []string, stdout, stderr, term io.Writer) (code int) {
	var c cli
	defer command.RecoverExit(&code)
	parser, err := command.NewParser(&c, "meshctl",
		"The control plane of a mesh: stores what each node should be, pushes it, shows what each node reports, and enrols nodes.",
		stdout, stderr, kong.Vars{"version": version})
	if err != nil {
		return command.Finish(stderr, "meshctl", err, command.ExitRefused)
	}
	completion.Answer(parser) // a shell asking for completions
	kctx, err := parser.Parse(args)
	if err != nil {
		return command.Finish(stderr, "meshctl", err, command.ExitRefused)
	}
	e := &env{ctx: ctx, stdout: stdout, stderr: stderr, terminal: term, now: time.Now, cli: &c}
	return command.Finish(stderr, "meshctl", classify(kctx.Run(e)), command.ExitFailed)
}

// authority opens the data directory's authority.
func (e *env) authority() (*authority.Authority, error) {
	a, err := authority.Open(e.cli.Data)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// client connects to the broker as the control user. The caller closes the
// connection.
func (e *env) client() (*client.Client, *nats.Conn, error) {
	a, err := e.authority()
	if err != nil {
		return nil, nil, err
	}
	nc, err := client.Dial(a, e.cli.NATS)
	if err != nil {
		return nil, nil, err
	}
	c, err := client.NewClient(nc, a.Mesh)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	c.Now = e.now
	c.Key = a.DeclarationKey()
	c.Operator = e.operator()
	if c.Secrets, err = a.Secrets(); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return c, nc, nil
}

// operator is who the operator's commands say declared: --operator, or
// the user and machine meshctl runs as.
func (e *env) operator() string {
	if e.cli.Operator != "" {
		return e.cli.Operator
	}
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		name += "@" + host
	}
	return name
}
