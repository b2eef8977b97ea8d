package drivers

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
)

// This file runs the tools drivers drive (dpkg, apt-get, systemctl, ...):
// the same way for every kind, killed with everything they started when
// their context ends, and with their own words in the error.

// toolEnv is added to the environment of every tool: no prompts, and
// messages in the C locale so that what a tool says reads the same on
// every machine.
var toolEnv = []string{"DEBIAN_FRONTEND=noninteractive", "LC_ALL=C"}

// waitDelay is how long a killed tool's output pipes may stay open (held
// by something that left its process group) before they are closed.
const waitDelay = 5 * time.Second

// maxMessage is how much of a tool's output an error carries: its tail,
// where tools put the reason they stopped.
const maxMessage = 4096

// ToolOutput is what a tool that ran said, and how it ended.
type ToolOutput struct {
	Cmdline        string
	Stdout, Stderr string
	// Code is the exit code; Status says how the tool ended in words.
	Code   int
	Status string
}

// Failed is the error for a tool that ran and did not succeed, wrapping
// the driver's sentinel: the command, how it ended, and what it said.
func (o ToolOutput) Failed(sentinel error) error {
	return fmt.Errorf("%w: %s: %s: %s", sentinel, o.Cmdline, o.Status, o.Message())
}

// Message is the tool's own message: its stderr, else its stdout.
func (o ToolOutput) Message() string {
	msg := strings.TrimSpace(o.Stderr)
	if msg == "" {
		msg = strings.TrimSpace(o.Stdout)
	}
	if msg == "" {
		return "(no output)"
	}
	if len(msg) > maxMessage {
		msg = "..." + msg[len(msg)-maxMessage:]
	}
	return msg
}

// RunTool runs the tool name, looked up on PATH, with args and extraEnv added
// to the environment. Stdin is empty. The tool runs in a process group of
// its own, and when ctx ends the whole group is killed (a package manager
// starts others: apt-get runs dpkg, dpkg runs maintainer scripts).
//
// The error is non-nil only when the tool did not run to an exit: missing
// (ErrToolMissing), not started, or killed because ctx ended (the
// error wraps context.Cause(ctx)). An exit code, zero or not, is in the
// output for the caller to judge.
func RunTool(ctx context.Context, extraEnv []string, name string, args ...string) (ToolOutput, error) {
	out := ToolOutput{Cmdline: strings.Join(append([]string{name}, args...), " ")}
	if ctx.Err() != nil {
		return out, fmt.Errorf("%s: not started: %w", out.Cmdline, context.Cause(ctx))
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return out, fmt.Errorf("%w: %s is not on PATH", ErrToolMissing, name)
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
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	if err != nil && ctx.Err() != nil {
		return out, fmt.Errorf("%s: killed: %w", out.Cmdline, context.Cause(ctx))
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		out.Code = exit.ExitCode()
		out.Status = fmt.Sprintf("exit code %d", out.Code)
		if out.Code < 0 {
			out.Status = exit.ProcessState.String()
		}
	case err != nil:
		return out, fmt.Errorf("%s: %w", out.Cmdline, err)
	default:
		out.Status = "exit code 0"
	}
	return out, nil
}

// WithTimeout bounds ctx by d; when d passes first, context.Cause of the
// result wraps the driver's sentinel and says after how long.
func WithTimeout(ctx context.Context, d time.Duration, sentinel error) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, fmt.Errorf("%w after %s: %w", sentinel, d, context.DeadlineExceeded))
}

// Turn lets one caller through at a time and gives up when ctx ends: a
// package manager holds a lock while it works, a service manager reloads
// everything, and a reconcile applies resources in parallel.
type Turn struct{ ch chan struct{} }

// NewTurn returns a free Turn.
func NewTurn() *Turn { return &Turn{ch: make(chan struct{}, 1)} }

// Take waits for the turn; release gives it back.
func (t *Turn) Take(ctx context.Context) (release func(), err error) {
	select {
	case t.ch <- struct{}{}:
		return func() { <-t.ch }, nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}
