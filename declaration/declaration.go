package declaration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/drivers"
)

// Declaration is the whole desired state of one node.
type Declaration struct {
	// Mesh and Node name the mesh and the node the declaration is for.
	Mesh string
	Node string
	// Revision orders a node's declarations; it is at least 1, or 0 in
	// one parsed from a file that left it out, for whoever stores it to
	// number (a declaration that travels or is stored always has one).
	Revision uint64
	// Resources are the specs in document order: *drivers.FileSpec,
	// *drivers.DirectorySpec, *drivers.ArchiveSpec, *drivers.PackageSpec
	// or *drivers.UnitSpec. A package's state is filled in when absent.
	Resources []drivers.Spec

	// file and where say where a parsed declaration came from, for
	// Refuse's messages; where is keyed by resource ID.
	file  string
	where map[string]located
}

// ParseYAML parses and checks a declaration written in YAML. name is the
// file name messages give. The error, if any, is Errors.
func ParseYAML(name string, data []byte) (*Declaration, error) {
	return parseYAML(name, data, MaxResources)
}

// parseYAML is ParseYAML with a limit of most resources, which tests
// lower to reach it with small documents.
func parseYAML(name string, data []byte, most int) (*Declaration, error) {
	if err := checkSize(name, data); err != nil {
		return nil, err
	}
	if err := checkUTF8(name, data); err != nil {
		return nil, err
	}
	if l, ok := listOf(data); ok {
		if decl, err, refused := parseInChunks(name, l, most); err == nil || refused {
			return decl, err
		}
		// Parsed whole again, for its errors as they always were.
	} else if l, ok := flowListOf(data); ok && len(l.items) > most {
		if _, err, refused := parseInChunks(name, l, most); refused {
			return nil, err
		}
	}
	return parseWholeAt(name, data, most)
}

// parseWhole parses data as one tree.
func parseWhole(name string, data []byte) (*Declaration, error) {
	return parseWholeAt(name, data, MaxResources)
}

// parseWholeAt parses data as one tree, with a limit of most resources.
func parseWholeAt(name string, data []byte, most int) (*Declaration, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) || err == nil && len(doc.Content) == 0 {
		return nil, Errors{{File: name, Line: 1, Column: 1,
			Msg: fmt.Sprintf("the declaration is empty: it needs %s", allOf(requiredFields))}}
	} else if err != nil {
		return nil, yamlSyntaxError(name, data, err)
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		return nil, Errors{{File: name, Line: next.Line, Column: next.Column,
			Msg: "a second document: a file holds one declaration, so leave out this \"---\" and what follows"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlSyntaxError(name, data, err)
	}
	return decodeWith(&decoder{file: name, most: most}, doc.Content[0])
}

// ParseJSON parses and checks a declaration in its wire form, JSON of the
// same shape as the YAML, with the same rules and messages.
func ParseJSON(name string, data []byte) (*Declaration, error) {
	return parseJSON(name, data, MaxResources)
}

// parseJSON is ParseJSON with a limit of most resources.
func parseJSON(name string, data []byte, most int) (*Declaration, error) {
	if err := checkSize(name, data); err != nil {
		return nil, err
	}
	if err := checkUTF8(name, data); err != nil {
		return nil, err
	}
	root, err := jsonNode(data, most)
	if err != nil {
		line, col := position(data, err.offset)
		return nil, Errors{{File: name, Line: line, Column: col, Msg: err.msg}}
	}
	return decodeWith(&decoder{file: name, most: most}, root)
}

func decodeWith(d *decoder, root *yaml.Node) (*Declaration, error) {
	name := d.file
	decl := d.document(root)
	if err := d.result(); err != nil {
		return nil, err
	}
	// YAML is terser than JSON: a package's state is filled in, a tab or
	// a "\0" is escaped longer.
	doc, err := decl.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if len(doc) > MaxBytes {
		return nil, Errors{tooLarge(name, len(doc), asJSON)}
	}
	decl.file = name
	return decl, nil
}

// checkUTF8 refuses text that is not UTF-8, at the first bad byte.
func checkUTF8(name string, data []byte) error {
	for off := 0; off < len(data); {
		r, size := utf8.DecodeRune(data[off:])
		if r == utf8.RuneError && size == 1 {
			line, col := position(data, off)
			return Errors{{File: name, Line: line, Column: col,
				Msg: fmt.Sprintf("byte 0x%02x is not UTF-8: a declaration is UTF-8 text", data[off])}}
		}
		off += size
	}
	return nil
}

// yamlSyntaxError places a syntax error from the YAML library. Its own
// positions are only a line, often the line where the enclosing collection
// began, and sometimes one line early; so the error is placed at the end
// of the shortest prefix of the document that fails with the same problem
// on the same line. The line too, because a prefix cut inside an earlier
// entry can fail with the same problem: in a list of {...} entries, any
// prefix that ends inside one fails with "did not find expected ',' or
// '}'", and the search would stop at whichever it met first.
func yamlSyntaxError(name string, data []byte, err error) error {
	problem := yamlProblem(err)
	whole := err.Error()
	lo, hi := 0, len(data)
	for lo < hi {
		mid := lo + (hi-lo)/2
		for mid > lo && !utf8.RuneStart(data[mid]) {
			mid--
		}
		if e := parseAll(data[:mid]); e != nil && e.Error() == whole {
			hi = mid
			continue
		}
		lo = mid + 1
		for lo < hi && !utf8.RuneStart(data[lo]) {
			lo++
		}
	}
	off := max(hi-1, 0)
	line, col := position(data, off)
	var at rune
	if off < len(data) {
		at, _ = utf8.DecodeRune(data[off:])
	}
	switch {
	case at == '\t':
		problem = "a tab in indentation: YAML indents with spaces only"
	case (at == '"' || at == '\'') && problem == "found unexpected end of stream":
		problem = "the string quoted here is never closed"
	case problem == "control characters are not allowed":
		problem = fmt.Sprintf("control characters such as %U are not allowed", at)
	case strings.Contains(problem, "'}'") && bytes.Contains(lineAt(data, off), []byte("${")):
		// {path: /opt/${version}} ends the mapping at the first "}".
		problem += `: in {...} a "}" ends the mapping, so quote a value that holds ${version}`
	}
	return Errors{{File: name, Line: line, Column: col, Msg: "invalid YAML: " + problem}}
}

// parseAll parses every document in data and returns the first error.
func parseAll(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// yamlProblem is the YAML library's message without its "yaml: line N: ".
func yamlProblem(err error) string {
	if err == nil {
		return ""
	}
	s := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(s, "line "); ok {
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			s = msg
		}
	}
	return s
}

// lineAt is the line holding the byte at off.
func lineAt(data []byte, off int) []byte {
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	end := bytes.IndexByte(data[off:], '\n')
	if end < 0 {
		return data[start:]
	}
	return data[start : off+end]
}

// position turns a byte offset into a line and a column, both from 1; the
// column counts characters.
func position(data []byte, off int) (line, col int) {
	off = min(off, len(data))
	start := bytes.LastIndexByte(data[:off], '\n') + 1
	return bytes.Count(data[:off], []byte("\n")) + 1, utf8.RuneCount(data[start:off]) + 1
}

// MarshalJSON writes the canonical wire form: mesh, node, revision and
// resources in that order, each resource a one-key object naming its kind,
// without HTML escaping or insignificant space. ParseJSON reads it back to
// an equal Declaration. A declaration not yet numbered (revision 0) is
// written without its revision, as its file left it out.
func (d *Declaration) MarshalJSON() ([]byte, error) {
	type wire struct {
		Mesh      string                          `json:"mesh"`
		Node      string                          `json:"node"`
		Revision  uint64                          `json:"revision,omitempty"`
		Resources []map[drivers.Kind]drivers.Spec `json:"resources"`
	}
	w := wire{d.Mesh, d.Node, d.Revision, make([]map[drivers.Kind]drivers.Spec, len(d.Resources))}
	for i, s := range d.Resources {
		if isNil(s) {
			return nil, fmt.Errorf("declaration: resources[%d] is nil", i)
		}
		w.Resources[i] = map[drivers.Kind]drivers.Spec{s.Kind(): s}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON parses the wire form as ParseJSON does, for a declaration
// carried inside another JSON message; positions in its errors count from
// the declaration's own first byte.
func (d *Declaration) UnmarshalJSON(data []byte) error {
	p, err := ParseJSON("", data)
	if err != nil {
		return err
	}
	*d = *p
	return nil
}

// Digest is "sha256:" and the hex of the SHA-256 of the canonical JSON, so
// two declarations that say the same thing have the same digest however
// their YAML was laid out. It panics on a nil resource, which no parsed
// declaration has.
func (d *Declaration) Digest() string {
	b, err := d.MarshalJSON()
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Expanded returns copies of the resources as the drivers take them: in
// every string value of an archive, "${version}" is replaced by the hex of
// the archive's digest. Other kinds are copied as they are.
//
// A relation that names an archive by its path as written, ${version} and
// all, names it expanded in the copies, as the reconciler knows it.
func (d *Declaration) Expanded() []drivers.Spec {
	out := make([]drivers.Spec, len(d.Resources))
	related := false
	for i, s := range d.Resources {
		out[i] = expand(s)
		related = related || drivers.RelationsOf(s) != nil
	}
	if related {
		d.expandRelations(out)
	}
	return out
}

// expand copies a spec, expanding ${version} if it is an archive. The
// copy's relations are its own.
func expand(s drivers.Spec) drivers.Spec {
	if isNil(s) {
		return s
	}
	c := copySpec(s)
	if rel := drivers.RelationsOf(c); rel != nil {
		rel.Requires, rel.Notify, rel.Subscribe = slices.Clone(rel.Requires), slices.Clone(rel.Notify), slices.Clone(rel.Subscribe)
	}
	return c
}

// copySpec copies a spec, expanding ${version} if it is an archive.
func copySpec(s drivers.Spec) drivers.Spec {
	switch s := s.(type) {
	case *drivers.FileSpec:
		c := *s
		c.Mode = copyMode(s.Mode)
		return &c
	case *drivers.DirectorySpec:
		c := *s
		c.Mode = copyMode(s.Mode)
		return &c
	case *drivers.PackageSpec:
		c := *s
		return &c
	case *drivers.UnitSpec:
		c := *s
		return &c
	case *drivers.ExecSpec:
		c := *s
		c.Command, c.Unless, c.OnlyIf = slices.Clone(s.Command), slices.Clone(s.Unless), slices.Clone(s.OnlyIf)
		c.Env, c.SuccessCodes = slices.Clone(s.Env), slices.Clone(s.SuccessCodes)
		return &c
	case *drivers.UserSpec:
		c := *s
		c.UID, c.Groups = copyInt(s.UID), slices.Clone(s.Groups)
		return &c
	case *drivers.GroupSpec:
		c := *s
		c.GID = copyInt(s.GID)
		return &c
	case *drivers.ArchiveSpec:
		c := *s
		hexDigits := strings.TrimPrefix(s.Digest, "sha256:")
		// Every string field, so that a field added to ArchiveSpec expands
		// too without a change here.
		v := reflect.ValueOf(&c).Elem()
		for i := range v.NumField() {
			if f := v.Field(i); f.Kind() == reflect.String {
				f.SetString(strings.ReplaceAll(f.String(), version, hexDigits))
			}
		}
		return &c
	}
	return s
}

func isNil(s drivers.Spec) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func copyInt(i *int) *int {
	if i == nil {
		return nil
	}
	c := *i
	return &c
}

func copyMode(m *drivers.Mode) *drivers.Mode {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// DecodeStored reads a declaration the host itself stored: MarshalJSON's
// output, journaled when the declaration was accepted. It was checked then,
// so it is decoded without positions or ParseJSON's rules, which cost
// time on every check of a large declaration and which a newer, stricter
// version must not hold against a declaration an older one accepted.
// Malformed input is still an error.
func DecodeStored(data []byte) (*Declaration, error) {
	type entry struct {
		File      *drivers.FileSpec      `json:"file"`
		Directory *drivers.DirectorySpec `json:"directory"`
		Archive   *drivers.ArchiveSpec   `json:"archive"`
		Package   *drivers.PackageSpec   `json:"package"`
		Unit      *drivers.UnitSpec      `json:"unit"`
		Exec      *drivers.ExecSpec      `json:"exec"`
		User      *drivers.UserSpec      `json:"user"`
		Group     *drivers.GroupSpec     `json:"group"`
	}
	var w struct {
		Mesh      string  `json:"mesh"`
		Node      string  `json:"node"`
		Revision  uint64  `json:"revision"`
		Resources []entry `json:"resources"`
	}
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: stored declaration: %v", ErrInvalid, err)
	}
	d := &Declaration{Mesh: w.Mesh, Node: w.Node, Revision: w.Revision, Resources: make([]drivers.Spec, 0, len(w.Resources))}
	for i, e := range w.Resources {
		var specs []drivers.Spec
		if e.File != nil {
			specs = append(specs, e.File)
		}
		if e.Directory != nil {
			specs = append(specs, e.Directory)
		}
		if e.Archive != nil {
			specs = append(specs, e.Archive)
		}
		if e.Package != nil {
			specs = append(specs, e.Package)
		}
		if e.Unit != nil {
			specs = append(specs, e.Unit)
		}
		if e.Exec != nil {
			specs = append(specs, e.Exec)
		}
		if e.User != nil {
			specs = append(specs, e.User)
		}
		if e.Group != nil {
			specs = append(specs, e.Group)
		}
		if len(specs) != 1 {
			return nil, fmt.Errorf("%w: stored declaration: resources[%d] names %d known kinds, want 1", ErrInvalid, i, len(specs))
		}
		d.Resources = append(d.Resources, specs[0])
	}
	return d, nil
}

// ParseNode checks a declaration already parsed into a YAML tree, as
// ParseYAML does after its parse: a program that composes or rewrites a
// document (package profile) keeps each node's line and column, so the
// messages point into the file it came from. name is that file's name.
func ParseNode(name string, root *yaml.Node) (*Declaration, error) {
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	return decodeWith(&decoder{file: name, most: MaxResources}, root)
}
