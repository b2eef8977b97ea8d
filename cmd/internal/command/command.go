// Package command is what the two command lines (mesh-host and meshctl)
// share around their grammars: the exit codes every command may return and
// the error that carries one through kong, the parser's construction with
// its exit hook, and the version and completion commands.
//
// It is not a grammar: each main declares its own commands and decides
// what each error means (mesh-host's damage, meshctl's refusals).
package command

import (
	"errors"
	"fmt"
	"io"

	"github.com/alecthomas/kong"

	"github.com/mesh-host/mesh-host/cmd/internal/completion"
)

// The exit codes both command lines use. A command line may add its own
// above them (mesh-host's plan and damage).
const (
	ExitOK      = 0
	ExitFailed  = 1 // the command ran and found a failure (or a disagreement)
	ExitRefused = 2 // bad usage, or input refused
)

// ExitError carries a command's exit code through kong to Finish. An
// empty Err exits with Code and says nothing more.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Refused is a command's refusal: exit code 2 with the message.
func Refused(format string, a ...any) error {
	return &ExitError{Code: ExitRefused, Err: fmt.Errorf(format, a...)}
}

// Silent exits with code and prints nothing more: the command said what
// it had to. ExitOK is no error.
func Silent(code int) error {
	if code == ExitOK {
		return nil
	}
	return &ExitError{Code: code, Err: errors.New("")}
}

// kongExit is panicked by kong's exit hook (after --help) and recovered
// by RecoverExit: kong would otherwise exit the process, which a test
// driving Main must not.
type kongExit int

// NewParser builds the grammar's parser as both command lines do: writing
// to stdout and stderr, a command's own flags listed before the global
// ones (group "global"), and kong's exits turned into a panic that
// RecoverExit, deferred by the caller, makes a return.
func NewParser(grammar any, name, description string, stdout, stderr io.Writer, vars kong.Vars) (*kong.Kong, error) {
	return kong.New(grammar,
		kong.Name(name),
		kong.Description(description),
		kong.Writers(stdout, stderr),
		kong.Exit(func(code int) { panic(kongExit(code)) }),
		kong.ExplicitGroups([]kong.Group{{Key: "global", Title: "Global flags:"}}),
		vars,
	)
}

// RecoverExit, deferred where NewParser's parser runs, sets *code to the
// code kong exited with; any other panic goes on.
func RecoverExit(code *int) {
	if p := recover(); p != nil {
		k, ok := p.(kongExit)
		if !ok {
			panic(p)
		}
		*code = int(k)
	}
}

// Finish prints err's message, prefixed with the program's name, and
// returns its exit code: an ExitError's own, else fallback.
func Finish(stderr io.Writer, name string, err error, fallback int) int {
	if err == nil {
		return ExitOK
	}
	code := fallback
	var ee *ExitError
	if errors.As(err, &ee) {
		code, err = ee.Code, ee.Err
	}
	if err != nil && err.Error() != "" {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	return code
}

// Version is the version command: it prints the kong variable "version",
// which each main sets to its link-time version.
type Version struct{}

// Run prints the version.
func (Version) Run(k *kong.Context, vars kong.Vars) error {
	_, err := fmt.Fprintln(k.Stdout, vars["version"])
	return err
}

// Completion is the completion command: the script that completes this
// binary's command line in a shell.
type Completion struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
}

// Run prints the script.
func (c Completion) Run(k *kong.Context) error {
	script, err := completion.ScriptForThis(c.Shell, k.Model.Name)
	if err != nil {
		// The grammar allows only the shells completion knows.
		return &ExitError{Code: ExitFailed, Err: err}
	}
	_, err = fmt.Fprint(k.Stdout, script)
	return err
}
