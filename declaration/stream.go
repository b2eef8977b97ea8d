package declaration

import (
	"bytes"
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

// Parsing a declaration's resources a chunk at a time.
//
// The YAML library builds the whole document's node tree before anything
// can be decoded from it: some 1.4 KB a file resource, 14 MB for 10,000
// files and 140 MB for 100,000, all alive at once beside the declaration
// being built. A declaration written the usual way (a block mapping at the
// left margin whose resources are a block list) is instead parsed as its
// head (every line but the list's) and then the list's entries, chunkItems
// at a time, each chunk's tree dropped once it is decoded.
//
// The chunked parse only ever accepts what the whole parse accepts, with
// the same result: an entry of a block list begins with "-" at the list's
// indentation, and a line there can only begin an entry or end the list,
// unless a construct (a quoted string, a flow collection) is still open
// across it; an open construct fails the parse of its chunk, and so does
// an alias to an anchor in another chunk. On any failure at all, syntax
// or content, the document is parsed whole again, so that every error is
// found and worded exactly as before. A document the scan below is not
// sure of (directives, a second document, a list in flow style, tabs) is
// parsed whole too.

// chunkItems is how many list entries one chunk holds: a tree of a few
// hundred kilobytes, and a parser's set-up spread over many entries.
const chunkItems = 512

// resourceList is the resources list of a document, found by listOf.
type resourceList struct {
	data  []byte // the whole document
	head  []byte // data with the list's lines emptied: same line numbers
	items []item
	end   int // offset just past the list
	// keyLine and keyColumn place the resources key the list is the
	// value of, which the head's must be.
	keyLine, keyColumn int
	// flow is set for a list in flow style, found by flowListOf.
	flow bool
	// cutLine and cutColumn place where the head's list was cut out, and
	// cutWidth is how many characters of that line went with it.
	cutLine, cutColumn, cutWidth int
}

// item is one list entry: the offset of its first line and that line's
// number (from 1). In a list in flow style, off is the entry's own
// offset, column its column and sep the offset of the "," or "]" after
// it.
//
// Its fields are 32 bits, which a document of at most MaxBytes needs: a
// list over the limit is held to its last entry before it is refused.
type item struct {
	off, line   int32
	column, sep int32
}

// listOf finds the resources list of a document written as a block
// mapping at the left margin with "resources:" alone on its line, followed
// by a block list. It says false for any other form.
func listOf(data []byte) (resourceList, bool) {
	if otherBreaks(data) {
		return resourceList{}, false
	}
	var (
		l      = resourceList{data: data}
		indent = -1 // the list's, once its first entry is seen
		start  = -1 // the offset of the line after "resources:"
		ended  bool
		line   = 0
	)
	for off := 0; off < len(data); {
		next := bytes.IndexByte(data[off:], '\n')
		if next < 0 {
			next = len(data)
		} else {
			next += off + 1
		}
		line++
		text := bytes.TrimRight(data[off:next], "\r\n")
		spaces := len(text) - len(bytes.TrimLeft(text, " "))
		rest := text[spaces:]
		blank := len(rest) == 0 || rest[0] == '#'
		switch {
		case bytes.HasPrefix(rest, []byte("\t")):
			return resourceList{}, false // the whole parse says what is wrong
		case blank:
			// Comments and empty lines belong where they are.
		case start < 0:
			if spaces == 0 && isResourcesLine(text) {
				start = next
				l.keyLine, l.keyColumn = line, 1
			} else if spaces == 0 && (bytes.HasPrefix(text, []byte("%")) || bytes.HasPrefix(text, []byte("..."))) {
				return resourceList{}, false
			}
		case ended:
			if spaces == 0 && againOrNext(text) {
				return resourceList{}, false
			}
		case indent < 0:
			if !isEntry(rest) {
				return resourceList{}, false // a flow list, or none
			}
			indent = spaces
			l.items = append(l.items, item{off: int32(off), line: int32(line)})
		case spaces == indent && isEntry(rest):
			l.items = append(l.items, item{off: int32(off), line: int32(line)})
		case spaces > indent:
			// More of the entry.
		case spaces == 0:
			// The next key of the document.
			if againOrNext(text) {
				return resourceList{}, false
			}
			ended, l.end = true, off
		default:
			return resourceList{}, false
		}
		off = next
	}
	if start < 0 || len(l.items) == 0 {
		return resourceList{}, false
	}
	if !ended {
		l.end = len(data)
	}
	// The head keeps every line, the list's emptied.
	lines := bytes.Count(data[start:l.end], []byte("\n"))
	head := make([]byte, 0, start+lines+len(data)-l.end)
	head = append(head, data[:start]...)
	head = append(head, bytes.Repeat([]byte("\n"), lines)...)
	l.head = append(head, data[l.end:]...)
	return l, true
}

// otherBreaks: data breaks lines other than by "\n" and "\r\n". The
// YAML library also counts a "\r" alone, NEL, LS and PS as line breaks,
// which the scan above would not, and a chunk after one would be placed
// on the wrong line.
func otherBreaks(data []byte) bool {
	return bytes.Count(data, []byte("\r")) != bytes.Count(data, []byte("\r\n")) ||
		bytes.Contains(data, []byte("\u0085")) || bytes.Contains(data, []byte("\u2028")) || bytes.Contains(data, []byte("\u2029"))
}

// isResourcesLine: "resources:" with nothing after it but a comment.
func isResourcesLine(text []byte) bool {
	rest, ok := bytes.CutPrefix(text, []byte("resources:"))
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " ")
	return len(rest) == 0 || rest[0] == '#'
}

// againOrNext: a line at the margin after the list that may be the
// resources field again, written any way (quoted, spaced), which the
// whole parse refuses, or another document.
func againOrNext(text []byte) bool {
	return bytes.HasPrefix(bytes.Trim(text, `"' `), []byte("resources")) ||
		bytes.HasPrefix(text, []byte("---")) || bytes.HasPrefix(text, []byte("..."))
}

// isEntry: a block list's entry begins with "-" alone or before a space.
func isEntry(rest []byte) bool {
	return len(rest) > 0 && rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ')
}

// chunks calls fn with each chunk's entries, in order, and the index of
// the chunk's first entry, up to the chunk that holds entry count-1. It stops at the first error: a chunk that does
// not parse by itself as a list of exactly its entries.
//
// Chunks are parsed ahead, parseAhead at a time, on other goroutines,
// while fn decodes the one before: the YAML library's parse is half of
// the time, and a host's other cores are idle while it reads a
// declaration. At most parseAhead chunks' trees are alive beside the one
// fn holds.
func (l resourceList) chunks(count int, fn func(first int, entries []*yaml.Node)) error {
	n := (min(count, len(l.items)) + chunkItems - 1) / chunkItems
	done := make(chan struct{})
	defer close(done)
	parsed := make([]chan chunkResult, n)
	for k := range parsed {
		parsed[k] = make(chan chunkResult, 1)
	}
	// A chunk takes a place ahead before it is handed out, in order, and
	// gives it back once decoded: the chunk decoded next always has its
	// place, whichever goroutine parses it.
	ahead := make(chan struct{}, parseAhead)
	next := make(chan int)
	go func() {
		defer close(next)
		for k := range n {
			select {
			case ahead <- struct{}{}:
			case <-done:
				return
			}
			select {
			case next <- k:
			case <-done:
				return
			}
		}
	}()
	for range min(parseAhead, n) {
		go func() {
			for k := range next {
				parsed[k] <- l.parse(k)
			}
		}()
	}
	for k := range n {
		r := <-parsed[k]
		if r.err != nil {
			return r.err
		}
		fn(k*chunkItems, r.entries)
		<-ahead
	}
	return nil
}

// parseAhead is how many chunks are parsed ahead of the one decoded.
const parseAhead = 2

// chunkResult is one chunk parsed: its entries, placed on their lines.
type chunkResult struct {
	entries []*yaml.Node
	err     error
}

// parse parses chunk k.
func (l resourceList) parse(k int) chunkResult {
	first := k * chunkItems
	last := min(first+chunkItems, len(l.items))
	if l.flow {
		return l.parseFlow(first, last)
	}
	end := l.end
	if last < len(l.items) {
		end = int(l.items[last].off)
	}
	doc, err := oneDocument(l.data[l.items[first].off:end])
	if err != nil {
		return chunkResult{err: err}
	}
	seq := doc.Content[0]
	if seq.Kind != yaml.SequenceNode || seq.Style != 0 || seq.Anchor != "" || len(seq.Content) != last-first {
		return chunkResult{err: errChunk}
	}
	shift(seq, int(l.items[first].line)-1)
	return chunkResult{entries: seq.Content}
}

var errChunk = errors.New("a chunk of the resources list is not a list of its entries")

// oneDocument parses b, which must hold one document with a value.
func oneDocument(b []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) || len(doc.Content) != 1 {
		return nil, errChunk
	}
	return &doc, nil
}

// shift moves a chunk's tree to the lines it has in the document.
func shift(n *yaml.Node, lines int) {
	n.Line += lines
	for _, c := range n.Content {
		shift(c, lines)
	}
}

// parseInChunks parses the document whose resources list is l: its head
// whole, its list a chunk at a time. An error means only that the whole
// parse must say what is wrong, unless refused: the list holds more than
// most entries, and err is what the whole parse would say of the document.
func parseInChunks(name string, l resourceList, most int) (decl *Declaration, err error, refused bool) {
	doc, err := oneDocument(l.head)
	if err != nil {
		return nil, err, false
	}
	if l.flow {
		l.headColumns(doc)
	}
	d := &decoder{file: name, chunked: &l, most: most}
	decl, err = decodeWith(d, doc.Content[0])
	return decl, err, d.refused && err != nil
}
