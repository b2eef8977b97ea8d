// Package profile composes a node's declaration from the fleet's profiles.
//
// A profile is a declaration without mesh, node or revision: resources,
// plus variables. The control service keeps the profiles, each with a
// selector and a priority; a node's declaration is the resources of every
// profile whose selector matches the node's labels, in priority order, with
// the variables filled in. The host never sees a profile: it receives one
// complete document, as it always has, so its journal stays enough to
// reconcile offline.
//
// Rendering is a pure function of its inputs (profiles, the node's name,
// labels and facts, and the revision), so the same inputs give the same
// bytes and the same digest whatever order the profiles are given in.
package profile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/labels"
)

// DefaultPriority is a profile's priority when none is given.
const DefaultPriority = 50

// Limits on what the control service stores; a profile's resources are
// bounded further by the declaration's own limits once rendered.
const (
	// MaxBytes bounds a profile's source. It is not a declaration's
	// (declaration.MaxBytes, which a file applied on the node may reach):
	// a profile is kept in one record of the control plane's bucket, and
	// what it renders travels in one push (linkproto.MaxDeclarationSize).
	MaxBytes = 1 << 20
	// MaxVars bounds the variables one profile defines.
	MaxVars = 256
	// MaxVarValue bounds a variable's value.
	MaxVarValue = 4096
	// MaxPriority bounds --priority either way.
	MaxPriority = 1_000_000
)

// Profile is a profile as stored: its source as the operator wrote it, so
// `profile show` gives it back and every error points into it.
type Profile struct {
	Name     string `json:"name"`
	Selector string `json:"selector"`
	Priority int    `json:"priority"`
	// File is the name the source was read from, for messages.
	File   string `json:"file"`
	Source string `json:"source"`
}

// Parsed is a profile whose source is checked: its tree, its variables
// and its selector, ready to render.
type Parsed struct {
	Profile
	selector  labels.Selector
	vars      map[string]string
	resources *yaml.Node
	// usesFacts says some ${fact.KEY} is in the resources.
	usesFacts bool
}

// nameRE is a profile's name: a DNS label, as a node's.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// varNameRE is a profile variable's name.
var varNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// reserved are the names ${...} gives another meaning.
var reserved = []string{"node", "mesh", "label", "fact", "version"}

// topFields are a profile's fields; documentOnly those a declaration has
// and a profile must not.
var (
	topFields    = []string{"vars", "resources"}
	documentOnly = []string{"mesh", "node", "revision"}
)

// CheckName checks a profile's name.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("profile name %q: use 1 to 63 lower-case letters, digits and inner hyphens", name)
	}
	return nil
}

// Parse checks p's name, selector, priority and source: a mapping of vars
// and resources, every variable well named and every ${...} one that
// rendering can fill in. What the resources say is checked when rendered
// for a node, by the declaration's own rules.
func Parse(p Profile) (*Parsed, error) {
	if err := CheckName(p.Name); err != nil {
		return nil, err
	}
	sel, err := labels.Parse(p.Selector)
	if err != nil {
		return nil, fmt.Errorf("profile %s: selector: %w", p.Name, err)
	}
	if p.Priority < -MaxPriority || p.Priority > MaxPriority {
		return nil, fmt.Errorf("profile %s: priority %d: keep it within ±%d", p.Name, p.Priority, MaxPriority)
	}
	if p.File == "" {
		p.File = p.Name
	}
	data := []byte(p.Source)
	if len(data) > MaxBytes {
		return nil, errs(p.File, 1, 1, "the profile is %d bytes; at most %d", len(data), MaxBytes)
	}
	if !utf8.Valid(data) {
		return nil, errs(p.File, 1, 1, "a profile is UTF-8 text")
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) || err == nil && len(doc.Content) == 0 {
		return nil, errs(p.File, 1, 1, "the profile is empty: it needs resources")
	} else if err != nil {
		// The declaration's parser places YAML errors well; a profile is
		// YAML of the same kind.
		if _, perr := declaration.ParseYAML(p.File, data); perr != nil {
			return nil, perr
		}
		return nil, errs(p.File, 1, 1, "invalid YAML: %v", err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, errs(p.File, next.Line, next.Column, "a second document: a profile file holds one profile")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, errs(p.File, root.Line, root.Column, "a profile is a mapping of vars and resources")
	}
	out := &Parsed{Profile: p, selector: sel, vars: map[string]string{}}
	var list Errors
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case slices.Contains(documentOnly, k.Value):
			add(&list, p.File, k, k.Value, "a profile names no %s: the control service fills in mesh, node and revision for each node", k.Value)
		case k.Value == "vars":
			out.readVars(v, &list)
		case k.Value == "resources":
			if out.resources != nil {
				add(&list, p.File, k, k.Value, "given twice")
			}
			out.resources = v
		default:
			add(&list, p.File, k, k.Value, "unknown field (known: %s)", strings.Join(topFields, ", "))
		}
	}
	if out.resources == nil {
		add(&list, p.File, root, "resources", "required field is missing")
	} else {
		out.checkReferences(out.resources, &list)
	}
	if len(list) > 0 {
		return nil, list
	}
	return out, nil
}

func (p *Parsed) readVars(v *yaml.Node, list *Errors) {
	if v.Kind != yaml.MappingNode {
		add(list, p.File, v, "vars", "a mapping of names to values")
		return
	}
	if len(v.Content)/2 > MaxVars {
		add(list, p.File, v, "vars", "%d variables; at most %d", len(v.Content)/2, MaxVars)
		return
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		field := "vars." + k.Value
		switch {
		case k.Kind != yaml.ScalarNode || !varNameRE.MatchString(k.Value):
			add(list, p.File, k, "vars", "variable name %q: a lower-case letter, then letters, digits, _ or -", k.Value)
		case slices.Contains(reserved, k.Value):
			add(list, p.File, k, field, "%q is reserved: ${%s} means something else", k.Value, k.Value)
		case val.Kind != yaml.ScalarNode || val.Tag == "!!null":
			add(list, p.File, val, field, "a variable's value is a string or a number")
		case len(val.Value) > MaxVarValue:
			add(list, p.File, val, field, "%d bytes; at most %d", len(val.Value), MaxVarValue)
		case strings.Contains(val.Value, "${"):
			add(list, p.File, val, field, "a variable's value cannot refer to another variable")
		default:
			if _, dup := p.vars[k.Value]; dup {
				add(list, p.File, k, field, "given twice")
				continue
			}
			p.vars[k.Value] = val.Value
		}
	}
}

// checkReferences checks every ${...} under n names something rendering
// can fill in; a label or a fact may still be missing on a given node,
// which rendering reports.
func (p *Parsed) checkReferences(n *yaml.Node, list *Errors) {
	walkScalars(n, func(s *yaml.Node) {
		for _, ref := range references(s.Value) {
			if ref.name == "version" {
				continue
			}
			if strings.HasPrefix(ref.name, "fact.") {
				p.usesFacts = true
			}
			if msg := p.refProblem(ref.name); msg != "" {
				line, col := refPosition(p.Source, s, ref.offset)
				*list = append(*list, &Error{File: p.File, Line: line, Column: col, Msg: msg})
			}
		}
	})
}

// refProblem says what is wrong with ${name}, if anything, before a node is
// known.
func (p *Parsed) refProblem(name string) string {
	if ns, key, ok := strings.Cut(name, "."); ok {
		switch ns {
		case "label":
			if labels.CheckKey(key) != nil {
				return fmt.Sprintf("${%s}: %q is not a label name", name, key)
			}
			return ""
		case "fact":
			if !slices.Contains(factNames, key) {
				return fmt.Sprintf("${%s}: unknown fact (known: %s)", name, strings.Join(factNames, ", "))
			}
			return ""
		}
		return fmt.Sprintf("unknown variable ${%s}: use ${node}, ${mesh}, ${label.KEY}, ${fact.KEY} or a name from vars", name)
	}
	switch {
	case name == "node" || name == "mesh":
		return ""
	case p.vars[name] != "" || hasVar(p.vars, name):
		return ""
	}
	return fmt.Sprintf("unknown variable ${%s}: use ${node}, ${mesh}, ${label.KEY}, ${fact.KEY} or a name from vars", name)
}

func hasVar(vars map[string]string, name string) bool {
	_, ok := vars[name]
	return ok
}

// reference is one ${name} in a string, at a byte offset.
type reference struct {
	name   string
	offset int
	end    int
}

// references finds every ${...} in s. An unclosed "${" is a reference to
// the rest of the string, which no name matches.
func references(s string) []reference {
	var out []reference
	for off := 0; ; {
		i := strings.Index(s[off:], "${")
		if i < 0 {
			return out
		}
		start := off + i
		j := strings.IndexByte(s[start:], '}')
		if j < 0 {
			return append(out, reference{name: s[start+2:], offset: start, end: len(s)})
		}
		out = append(out, reference{name: s[start+2 : start+j], offset: start, end: start + j + 1})
		off = start + j + 1
	}
}

// refPosition places the byte at offset of scalar s in src, the profile's
// source: exactly for a scalar on one line, quoted or not, escapes and
// all; at the scalar otherwise.
func refPosition(src string, s *yaml.Node, offset int) (line, col int) {
	if s.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		if c, ok := quotedColumn(sourceLine(src, s.Line), s.Column, utf8.RuneCountInString(s.Value[:offset])); ok {
			return s.Line, c
		}
		return s.Line, s.Column
	}
	if strings.Contains(s.Value, "\n") || s.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return s.Line, s.Column
	}
	return s.Line, s.Column + utf8.RuneCountInString(s.Value[:offset])
}

// sourceLine is line n (from 1) of src, without its end.
func sourceLine(src string, n int) string {
	for ; n > 1; n-- {
		_, rest, ok := strings.Cut(src, "\n")
		if !ok {
			return ""
		}
		src = rest
	}
	line, _, _ := strings.Cut(src, "\n")
	return line
}

// quotedColumn is the column (from 1, in characters, as YAML counts them)
// of the character that is the nth of the value of the quoted scalar
// opening at column quote of line: each escape is one character of the
// value ("\t" or "\x41" in double quotes, a doubled quote in single ones). It is not ok when the value does not reach its
// nth character on this line (a scalar folded over lines).
func quotedColumn(line string, quote, nth int) (int, bool) {
	raw := []rune(line)
	if quote < 1 || quote > len(raw) || raw[quote-1] != '"' && raw[quote-1] != '\'' {
		return 0, false
	}
	q := raw[quote-1]
	for i, seen := quote, 0; i < len(raw); seen++ {
		switch {
		case raw[i] == q && (q == '"' || i+1 >= len(raw) || raw[i+1] != '\''):
			return 0, false // the scalar ended first
		case seen == nth:
			return i + 1, true
		case q == '\'' && raw[i] == '\'':
			i += 2 // '' is one '
		case q == '"' && raw[i] == '\\' && i+1 < len(raw):
			switch raw[i+1] {
			case 'x':
				i += 4
			case 'u':
				i += 6
			case 'U':
				i += 10
			default:
				i += 2
			}
		default:
			i++
		}
	}
	return 0, false
}

// walkScalars calls f on every scalar value under n (mapping keys are
// field names, not values, and are left alone). Aliases are not followed:
// the declaration refuses them.
func walkScalars(n *yaml.Node, f func(*yaml.Node)) {
	switch n.Kind {
	case yaml.ScalarNode:
		f(n)
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			walkScalars(n.Content[i], f)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			walkScalars(c, f)
		}
	}
}
