package declaration

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// jsonError is a JSON syntax error at a byte offset.
type jsonError struct {
	offset int
	msg    string
}

// jsonNode parses JSON into the node tree the YAML parser makes, each node
// placed at the offset of its first byte, so that one decoder serves both.
// JSON is read by encoding/json rather than as YAML, whose reader refuses
// some strings JSON allows (escaped surrogate pairs, raw C1 controls).
//
// A resources list of more than most entries costs no tree: the decoder
// refuses it by the place of the entry one past the limit alone, so that
// entry is the only one made a node; the others are read and skipped,
// and stand in the list as one empty node. Whether the list is over is
// told first by flowItems, which only scans, and then by the reader: if
// the list turns out not to be over, it is read again, all of it.
func jsonNode(data []byte, most int) (*yaml.Node, *jsonError) {
	// Valid checks without the copy Unmarshal makes; Unmarshal only says
	// where a document that is not valid goes wrong.
	var raw json.RawMessage
	if json.Valid(data) {
		// Read below.
	} else if err := json.Unmarshal(data, &raw); err != nil {
		var se *json.SyntaxError
		if !errors.As(err, &se) {
			return nil, &jsonError{0, "invalid JSON: " + err.Error()}
		}
		// Offset counts the bytes read, the offending one included; at
		// the end of the input there is no offending byte.
		off := int(se.Offset)
		if off > 0 && off <= len(data) && se.Error() != "unexpected end of JSON input" {
			off--
		}
		return nil, &jsonError{off, "invalid JSON: " + se.Error()}
	}
	over := -1
	if items, ok := flowItems(data); ok && len(items) > most {
		over = most
	}
	for {
		r := &jsonReader{data: data, dec: json.NewDecoder(bytes.NewReader(data)), at: cursor{data: data, line: 1, col: 1}, over: over}
		r.dec.UseNumber()
		n, err := r.value(0, false)
		switch {
		case errors.Is(err, errNotOver):
			over = -1
			continue
		case err != nil:
			return nil, &jsonError{r.start, "invalid JSON: " + err.Error()}
		}
		return n, nil
	}
}

// errNotOver is returned by jsonReader.value when a resources list read
// as over the limit is not.
var errNotOver = errors.New("the resources list is not over the limit")

type jsonReader struct {
	data []byte
	dec  *json.Decoder
	// start is the offset of the token read last.
	start int
	at    cursor
	// over, if not -1, is the limit the resources list is over: only
	// its entry at that index is made a node.
	over int
}

// cursor turns offsets into line and column as they increase, counting only
// the bytes since the last one: a 10,000-resource document on one line has
// a token every few bytes, and counting from the start each time made
// parsing quadratic.
type cursor struct {
	data           []byte
	off, line, col int
}

func (c *cursor) position(off int) (line, col int) {
	off = min(off, len(c.data))
	if off < c.off {
		return position(c.data, off)
	}
	seg := c.data[c.off:off]
	if i := bytes.LastIndexByte(seg, '\n'); i >= 0 {
		c.line += bytes.Count(seg, []byte("\n"))
		c.col = utf8.RuneCount(seg[i+1:]) + 1
	} else {
		c.col += utf8.RuneCount(seg)
	}
	c.off = off
	return c.line, c.col
}

var jsonInteger = regexp.MustCompile(`^-?(0|[1-9][0-9]*)$`)

// token reads the next token and the node for it, placed at its start.
func (r *jsonReader) token() (json.Token, *yaml.Node, error) {
	off := int(r.dec.InputOffset())
	for off < len(r.data) && bytes.IndexByte([]byte(" \t\r\n,:"), r.data[off]) >= 0 {
		off++
	}
	r.start = off
	tok, err := r.dec.Token()
	line, col := r.at.position(off)
	return tok, &yaml.Node{Line: line, Column: col}, err
}

// value reads a value at depth (the document is at 0); list says it is
// the document's resources list.
func (r *jsonReader) value(depth int, list bool) (*yaml.Node, error) {
	tok, n, err := r.token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n.Kind, n.Tag, n.Style = yaml.MappingNode, "!!map", yaml.FlowStyle
			for r.dec.More() {
				k, key, err := r.token()
				if err != nil {
					return nil, err
				}
				key.Kind, key.Tag, key.Style, key.Value = yaml.ScalarNode, "!!str", yaml.DoubleQuotedStyle, k.(string)
				v, err := r.value(depth+1, depth == 0 && key.Value == "resources")
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, key, v)
			}
		case '[':
			n.Kind, n.Tag, n.Style = yaml.SequenceNode, "!!seq", yaml.FlowStyle
			if list && r.over >= 0 {
				if err := r.overLimit(n, depth); err != nil {
					return nil, err
				}
				break
			}
			for r.dec.More() {
				v, err := r.value(depth+1, false)
				if err != nil {
					return nil, err
				}
				n.Content = append(n.Content, v)
			}
		}
		if _, err := r.dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		n.Kind, n.Tag, n.Style, n.Value = yaml.ScalarNode, "!!str", yaml.DoubleQuotedStyle, t
	case json.Number:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!float", t.String()
		if jsonInteger.MatchString(n.Value) {
			n.Tag = "!!int"
		}
	case bool:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!bool", "false"
		if t {
			n.Value = "true"
		}
	case nil:
		n.Kind, n.Tag, n.Value = yaml.ScalarNode, "!!null", "null"
	}
	return n, nil
}

// overLimit reads the entries of n, a resources list over the limit
// r.over, making a node of the entry at that index alone.
func (r *jsonReader) overLimit(n *yaml.Node, depth int) error {
	skipped := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}
	for r.dec.More() {
		if len(n.Content) != r.over {
			n.Content = append(n.Content, skipped)
			if err := r.skip(); err != nil {
				return err
			}
			continue
		}
		v, err := r.value(depth+1, false)
		if err != nil {
			return err
		}
		n.Content = append(n.Content, v)
	}
	if len(n.Content) <= r.over {
		return errNotOver
	}
	return nil
}

// skip reads one value and makes no node of it.
func (r *jsonReader) skip() error {
	depth := 0
	for {
		tok, err := r.dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}
