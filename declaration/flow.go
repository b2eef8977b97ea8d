package declaration

import (
	"bytes"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Finding a resources list written in flow style, to refuse it when it is
// over the limit without building its tree.
//
// A list in flow style ("resources: [...]", or JSON read as YAML) is
// parsed whole when it is within the limit: its entries are not lines, and
// the chunked parse's argument that it accepts only what the whole parse
// accepts does not carry over. But a list over the limit is refused, and
// refusing it needs only the place of its entry one past the limit: the
// scan below splits the list at its commas, and the chunks up to that
// entry are then parsed, each by itself as "[" + its entries + "]", and
// must come out a list of exactly the entries the scan found. A scan that
// is wrong about an entry (a comma it took for a separator, a string it
// did not see) makes the chunk that holds it fail, or hold another number
// of entries, and the document is parsed whole. Anything the scan is not
// sure of (anchors, aliases, tags, explicit keys, a document marker) stops
// it: the whole parse says what it is.

// flowListOf finds the resources list in flow style of a document: either
// a block mapping at the left margin with a line "resources: [", or a
// document that is one flow mapping with a key "resources" (plain or
// quoted) whose value is a list. It says false for any other form.
func flowListOf(data []byte) (resourceList, bool) {
	s, open, items, ok := scanFlow(data)
	if !ok {
		return resourceList{}, false
	}
	l := resourceList{data: data, flow: true, keyLine: s.keyLine, keyColumn: s.keyColumn, items: items, end: s.off}
	// The head keeps every line, the list cut out but for its line
	// breaks; what follows it on its last line is moved back to its
	// columns once parsed (headColumns).
	list := data[open:l.end]
	breaks := bytes.Count(list, []byte("\n"))
	l.cutLine = s.line
	l.cutColumn, l.cutWidth = 1, utf8.RuneCount(list[bytes.LastIndexByte(list, '\n')+1:])
	if breaks == 0 {
		l.cutColumn = s.line0Column(open)
	}
	head := make([]byte, 0, open+breaks+len(data)-l.end)
	head = append(head, data[:open]...)
	head = append(head, bytes.Repeat([]byte("\n"), breaks)...)
	l.head = append(head, data[l.end:]...)
	return l, true
}

// flowItems is the entries of the resources list in flow style of a
// document, as flowListOf finds them.
func flowItems(data []byte) ([]item, bool) {
	_, _, items, ok := scanFlow(data)
	return items, ok
}

// scanFlow finds the list for flowListOf: the scanner, left just past the
// list, the list's "[" and its entries.
func scanFlow(data []byte) (s *flowScanner, open int, items []item, ok bool) {
	if otherBreaks(data) || bytes.Contains(data, []byte("\uFEFF")) {
		return nil, 0, nil, false
	}
	s = &flowScanner{data: data, line: 1}
	if !s.space() {
		return nil, 0, nil, false
	}
	if s.off < len(data) && data[s.off] == '{' {
		ok = s.rootKey()
	} else {
		ok = s.blockKey()
	}
	if !ok {
		return nil, 0, nil, false
	}
	open = s.off
	if items, ok = s.list(); !ok {
		return nil, 0, nil, false
	}
	return s, open, items, true
}

// flowScanner reads the tokens of YAML's flow style, as far as telling
// the structure apart: collections, commas, colons, scalars.
type flowScanner struct {
	data []byte
	off  int
	// line is the line of off, from 1; lineStart the offset it begins at.
	line, lineStart int
	// keyLine and keyColumn place the resources key, once found.
	keyLine, keyColumn int
	// col is the column of colOff, on the line of off or an earlier one.
	colOff, col int
}

// column is off's column, from 1, in characters. It counts from the
// column it gave last on the same line: JSON is often one long line.
func (s *flowScanner) column() int {
	if s.col == 0 || s.colOff < s.lineStart || s.colOff > s.off {
		s.colOff, s.col = s.lineStart, 1
	}
	s.col += utf8.RuneCount(s.data[s.colOff:s.off])
	s.colOff = s.off
	return s.col
}

// line0Column is the column of off, on the scanner's line.
func (s *flowScanner) line0Column(off int) int {
	return utf8.RuneCount(s.data[s.lineStart:off]) + 1
}

// newline moves past the line break at off.
func (s *flowScanner) newline() {
	s.off++
	s.line++
	s.lineStart = s.off
}

// space moves past white space and comments. It says false at what the
// scan is not sure of: a document marker or a directive at the margin.
func (s *flowScanner) space() bool {
	for s.off < len(s.data) {
		switch c := s.data[s.off]; c {
		case ' ', '\t', '\r':
			s.off++
		case '\n':
			s.newline()
		case '#':
			for s.off < len(s.data) && s.data[s.off] != '\n' {
				s.off++
			}
		default:
			if s.off == s.lineStart && s.marker() {
				return false
			}
			return true
		}
	}
	return true
}

// marker: a document marker or a directive at off, the margin.
func (s *flowScanner) marker() bool {
	rest := s.data[s.off:]
	if len(rest) > 0 && rest[0] == '%' {
		return true
	}
	return (bytes.HasPrefix(rest, []byte("---")) || bytes.HasPrefix(rest, []byte("..."))) && blankz(rest, 3)
}

// blankz: a blank, a line break or the end at b[i].
func blankz(b []byte, i int) bool {
	return i >= len(b) || b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n'
}

// scalar moves past the scalar at off, quoted or plain. It says false at
// what does not begin one, or at a quoted scalar left open.
func (s *flowScanner) scalar() bool {
	switch c := s.data[s.off]; c {
	case '"', '\'':
		s.off++
		for s.off < len(s.data) {
			switch s.data[s.off] {
			case '\n':
				s.newline()
				continue
			case '\\':
				if c == '"' {
					s.off++
					if s.off < len(s.data) && s.data[s.off] == '\n' {
						s.newline()
						continue
					}
				}
			case c:
				if c == '\'' && s.off+1 < len(s.data) && s.data[s.off+1] == '\'' {
					s.off++
					break
				}
				s.off++
				return true
			}
			s.off++
		}
		return false
	case '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '%', '@', '`':
		// '-' may begin a plain scalar ("-1"), but not before a blank.
		if c != '-' || blankz(s.data, s.off+1) {
			return false
		}
	}
	// A plain scalar goes on, over blanks and line breaks, up to an
	// indicator or a comment.
	for s.off < len(s.data) {
		switch c := s.data[s.off]; c {
		case ',', '?', '[', ']', '{', '}':
			return true
		case ':':
			if blankz(s.data, s.off+1) {
				return true
			}
			s.off++
		case ' ', '\t', '\r', '\n':
			for s.off < len(s.data) && blankz(s.data, s.off) {
				if s.data[s.off] == '\n' {
					s.newline()
				} else {
					s.off++
				}
			}
			if s.off == s.lineStart && s.off < len(s.data) && s.marker() {
				return false
			}
			if s.off < len(s.data) && s.data[s.off] == '#' {
				return true
			}
		default:
			s.off++
		}
	}
	return true
}

// value moves past one node at off: a scalar or a whole collection.
func (s *flowScanner) value() bool {
	if s.off >= len(s.data) {
		return false
	}
	switch s.data[s.off] {
	case '[', '{':
		depth := 0
		for {
			if !s.space() || s.off >= len(s.data) {
				return false
			}
			switch s.data[s.off] {
			case '[', '{':
				depth++
				s.off++
			case ']', '}':
				depth--
				s.off++
				if depth == 0 {
					return true
				}
			case ',', ':':
				s.off++
			default:
				if !s.scalar() {
					return false
				}
			}
		}
	}
	return s.scalar()
}

// rootKey finds, in the flow mapping at off that is the whole document,
// the first key written resources, "resources" or 'resources' whose value
// is a list, and leaves off at the list's "[".
func (s *flowScanner) rootKey() bool {
	s.off++ // "{"
	for {
		if !s.space() || s.off >= len(s.data) {
			return false
		}
		line, column, start := s.line, s.column(), s.off
		if !s.scalar() {
			return false
		}
		key := bytes.TrimRight(s.data[start:s.off], " \t\r\n")
		if !s.space() || s.off >= len(s.data) || s.data[s.off] != ':' {
			return false
		}
		s.off++
		if !s.space() || s.off >= len(s.data) {
			return false
		}
		switch string(key) {
		case "resources", `"resources"`, "'resources'":
			if s.data[s.off] != '[' {
				return false
			}
			s.keyLine, s.keyColumn = line, column
			return true
		}
		if !s.value() || !s.space() || s.off >= len(s.data) || s.data[s.off] != ',' {
			return false
		}
		s.off++
	}
}

// blockKey finds the first line at the margin that is "resources:" and a
// "[", and leaves off at the "[".
func (s *flowScanner) blockKey() bool {
	s.line = 1
	for off := 0; off < len(s.data); {
		next := bytes.IndexByte(s.data[off:], '\n')
		if next < 0 {
			next = len(s.data)
		} else {
			next += off + 1
		}
		if rest, ok := bytes.CutPrefix(s.data[off:next], []byte("resources:")); ok {
			value := bytes.TrimLeft(rest, " ")
			if len(value) == 0 || value[0] != '[' || len(value) == len(rest) {
				return false
			}
			s.keyLine, s.keyColumn = s.line, 1
			s.off = next - len(value)
			s.lineStart = off
			return true
		}
		s.line++
		off = next
	}
	return false
}

// list reads the list at off, its "[", up to its "]", and returns its
// entries.
func (s *flowScanner) list() ([]item, bool) {
	var items []item
	s.off++ // "["
	for {
		if !s.space() || s.off >= len(s.data) {
			return nil, false
		}
		if s.data[s.off] == ']' && len(items) == 0 {
			s.off++
			return items, true
		}
		it := item{off: int32(s.off), line: int32(s.line), column: int32(s.column())}
		if !s.value() || !s.space() || s.off >= len(s.data) {
			return nil, false
		}
		// An entry may be a mapping of one pair, "key: value".
		if s.data[s.off] == ':' {
			s.off++
			if !s.space() || s.off >= len(s.data) {
				return nil, false
			}
			if c := s.data[s.off]; c != ',' && c != ']' && (!s.value() || !s.space() || s.off >= len(s.data)) {
				return nil, false
			}
		}
		it.sep = int32(s.off)
		items = append(items, it)
		switch s.data[s.off] {
		case ']':
			s.off++
			return items, true
		case ',':
			s.off++
			if !s.space() || s.off >= len(s.data) || s.data[s.off] == ']' {
				// A trailing comma: the whole parse says what it makes.
				return nil, false
			}
		default:
			return nil, false
		}
	}
}

// parseFlow parses the entries first to last of a list in flow style, as
// a list by itself, and places them where they are in the document.
func (l resourceList) parseFlow(first, last int) chunkResult {
	start, end := int(l.items[first].off), int(l.items[last-1].sep)
	chunk := make([]byte, 0, end-start+2)
	chunk = append(chunk, '[')
	chunk = append(chunk, l.data[start:end]...)
	chunk = append(chunk, ']')
	doc, err := oneDocument(chunk)
	if err != nil {
		return chunkResult{err: err}
	}
	seq := doc.Content[0]
	if seq.Kind != yaml.SequenceNode || seq.Style != yaml.FlowStyle || seq.Anchor != "" || len(seq.Content) != last-first {
		return chunkResult{err: errChunk}
	}
	// The chunk's first line is "[" and the rest of the entry's line.
	shiftFlow(seq, int(l.items[first].line)-1, int(l.items[first].column)-2)
	return chunkResult{entries: seq.Content}
}

// shiftFlow moves a chunk's tree to the lines it has in the document, and
// what is on its first line to the columns.
func shiftFlow(n *yaml.Node, lines, columns int) {
	if n.Line == 1 {
		n.Column += columns
	}
	n.Line += lines
	for _, c := range n.Content {
		shiftFlow(c, lines, columns)
	}
}

// headColumns moves what follows a list in flow style on its last line,
// in the head's tree, back to the columns it has in the document.
func (l resourceList) headColumns(n *yaml.Node) {
	if n.Line == l.cutLine && n.Column >= l.cutColumn {
		n.Column += l.cutWidth
	}
	for _, c := range n.Content {
		l.headColumns(c)
	}
}
