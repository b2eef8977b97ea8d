package profile

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/declaration"
)

// Error and Errors are the declaration's: a profile's problems read as a
// declaration's do, FILE:LINE:COL: FIELD: MSG.
type (
	Error  = declaration.Error
	Errors = declaration.Errors
)

func errs(file string, line, col int, format string, args ...any) Errors {
	return Errors{{File: file, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}}
}

func add(es *Errors, file string, n *yaml.Node, field, format string, args ...any) {
	*es = append(*es, &Error{File: file, Line: n.Line, Column: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)})
}
