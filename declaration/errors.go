package declaration

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by this package.
var (
	// ErrInvalid is returned, inside Errors or an *Error, for every
	// declaration ParseYAML or ParseJSON refuses and by Refuse.
	ErrInvalid = errors.New("invalid declaration")
	// ErrOwnUnit is returned by Refuse for a declaration that names the
	// host's own unit: the installation owns the host, never a declaration.
	ErrOwnUnit = errors.New("declares the host's own unit")
	// ErrOwnInstallation is returned by RefuseInstallation for a
	// declaration that touches the host's own installation otherwise: its
	// state, binaries, versions or package.
	ErrOwnInstallation = errors.New("touches the host's own installation")
	// ErrLimit is returned, beside ErrInvalid, for a declaration over one
	// of the limits in limits.go; the message names the limit.
	ErrLimit = errors.New("over a declaration limit")
)

// maxErrors is how many problems a parse reports before it stops listing
// them: past that, the file is more wrong than a list helps with.
const maxErrors = 20

// Error is one problem with a declaration, at the node that has it.
type Error struct {
	// File is the name the declaration was parsed under.
	File string
	// Line and Column locate the offending node, from 1; Column counts
	// characters, not bytes. They are 0 when the position is unknown (a
	// declaration built in Go rather than parsed).
	Line, Column int
	// Field is the path of the field at fault, such as
	// "resources[2].file.mode", or empty for a problem with the document
	// as a whole.
	Field string
	// Msg says what is wrong and, where it can, how to put it right.
	Msg string

	// sentinel is returned by Unwrap beside ErrInvalid, when set.
	sentinel error
}

// Error formats e as "FILE:LINE:COL: FIELD: MSG", leaving out what is
// unknown.
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteByte(':')
	}
	if e.Line > 0 {
		fmt.Fprintf(&b, "%d:%d:", e.Line, e.Column)
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap makes every Error match ErrInvalid, and ErrOwnUnit or ErrLimit
// where it is one.
func (e *Error) Unwrap() []error {
	if e.sentinel != nil {
		return []error{ErrInvalid, e.sentinel}
	}
	return []error{ErrInvalid}
}

// Errors is every problem a parse found, sorted by position.
type Errors []*Error

// Error lists the problems one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns each problem, so errors.Is(err, ErrInvalid) holds and
// errors.As finds the first *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
