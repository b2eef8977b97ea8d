package pkg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
)

// toolEnv is added to the environment of every tool: no prompts, and
// messages in the C locale so that what a tool says reads the same on
// every machine.
var toolEnv = []string{"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}

// waitDelay is how long a killed tool's output pipes may stay open (held
// by something that left its process group) before they are closed.
const waitDelay = 5 * time.Second

// maxMessage is how much of a tool's output an error carries: its tail,
// where package managers put the reason they stopped.
const maxMessage = 4096

// output is what a tool that ran said, and how it ended.
type output struct {
	cmdline        string
	stdout, stderr string
	// code is the exit code; status says how the tool ended in words.
	code   int
	status string
}

// failed is the error for a tool that ran and did not succeed: the
// command, how it ended, and what it said.
func (o output) failed() error {
	return fmt.Errorf("%w: %s: %s: %s", ErrToolFailed, o.cmdline, o.status, o.message())
}

// message is the tool's own message: its stderr, else its stdout.
func (o output) message() string {
	msg := strings.TrimSpace(o.stderr)
	if msg == "" {
		msg = strings.TrimSpace(o.stdout)
	}
	if msg == "" {
		return "(no output)"
	}
	if len(msg) > maxMessage {
		msg = "..." + msg[len(msg)-maxMessage:]
	}
	return msg
}

// run runs the tool name, looked up on PATH, with args and extraEnv added
// to the environment. Stdin is empty. The tool runs in a process group of
// its own, and when ctx ends the whole group is killed (a package manager
// starts others: apt-get runs dpkg, dpkg runs maintainer scripts).
//
// The error is non-nil only when the tool did not run to an exit: missing
// (drivers.ErrToolMissing), not started, or killed because ctx ended (the
// error wraps context.Cause(ctx)). An exit code, zero or not, is in the
// output for the caller to judge.
func run(ctx context.Context, extraEnv []string, name string, args ...string) (output, error) {
	out := output{cmdline: strings.Join(append([]string{name}, args...), " ")}
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s: not started: %w", out.cmdline, context.Cause(ctx))
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return out, fmt.Errorf("%w: %s is not on PATH", drivers.ErrToolMissing, name)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(append(os.Environ(), toolEnv...), extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	cmd.WaitDelay = waitDelay
	err = cmd.Run()
	out.stdout, out.stderr = stdout.String(), stderr.String()
	if err != nil && ctx.Err() != nil {
		return out, fmt.Errorf("%s: killed: %w", out.cmdline, context.Cause(ctx))
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		out.code = exit.ExitCode()
		out.status = fmt.Sprintf("exit code %d", out.code)
		if out.code < 0 {
			out.status = exit.ProcessState.String()
		}
	case err != nil:
		return out, fmt.Errorf("%s: %w", out.cmdline, err)
	default:
		out.status = "exit code 0"
	}
	return out, nil
}

// withTimeout bounds ctx by d; when d passes first, context.Cause of the
// result wraps ErrTimeout and says after how long.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w after %s: %w", ErrTimeout, d, context.DeadlineExceeded))
}
