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
	"os"
	"path/filepath"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/mesh-host/mesh-host/cmd/internal/completion"
	"github.com/mesh-host/mesh-host/upgrade"
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
// which each main sets to its link-time version, and the digests that
// `status` and `nodes` name a running version by (PrintVersion).
type Version struct{}

// Run prints the version.
func (Version) Run(k *kong.Context, vars kong.Vars) error {
	return PrintVersion(k.Stdout, vars["version"])
}

// VersionFlag is --version: the version command as a flag.
type VersionFlag bool

// BeforeReset prints the version and exits 0, before anything else is
// parsed or checked.
func (VersionFlag) BeforeReset(app *kong.Kong, vars kong.Vars) error {
	if err := PrintVersion(app.Stdout, vars["version"]); err != nil {
		return err
	}
	app.Exit(ExitOK)
	return nil
}

// PrintVersion prints version, the label given at link time (a commit),
// on a line of its own, then the executable's own digest, `executable
// sha256:HEX`, and, when it runs from a host's version directory, `version
// NAME`, the name that `status` and `meshctl nodes` show. The label alone
// cannot tell two builds of one commit apart, nor a release from the
// binary it was packed from. The digest is computed here, on request, not
// at every start: hashing the binary costs a read of all of it.
func PrintVersion(w io.Writer, version string) error {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	return printVersion(w, version, exe, err)
}

// printVersion is PrintVersion for the executable exe, or the error that
// found none.
func printVersion(w io.Writer, version, exe string, err error) error {
	lines := []string{version}
	if err == nil {
		var digest string
		if digest, err = upgrade.FileDigest(exe); err == nil {
			lines = append(lines, "executable sha256:"+digest)
		}
	}
	if err != nil {
		lines = append(lines, fmt.Sprintf("executable: no digest (%v)", err))
	} else if dir := filepath.Dir(exe); filepath.Base(exe) == upgrade.Executable {
		if v, err := upgrade.Lookup(filepath.Dir(dir), filepath.Base(dir)); err == nil {
			lines = append(lines, "version "+v.Name)
		}
	}
	_, err = fmt.Fprintln(w, strings.Join(lines, "\n"))
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
