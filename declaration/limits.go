package declaration

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// The limits on a declaration. The parser checks every one of them, so the
// doors that parse (meshctl declare, mesh-host apply, a push the host
// accepts) refuse the same declarations, naming the limit, before anything
// is stored or journaled. TestLimitsFit holds them to what they must fit.
//
// MaxBytes bounds the document as it is parsed (checked before the YAML or
// JSON library reads it, which builds a node tree many times its size) and
// in its JSON form (MarshalJSON), which is what travels and is journaled;
// meshctl checks it again once secrets are sealed, since a sealed secret is
// larger than its name. MaxBytes and MaxResources admit 100,000 files of a
// realistic size (a path like /srv/data/dir123/file-000123.conf, a line of
// content and a mode: about 105 bytes each, as YAML or as JSON) twice
// over. What they bound is the host's memory, not a record: a declaration
// becomes
//
//   - A push: one NATS message of at most linkproto.MaxDeclarationSize
//     (8 MiB, the broker's max_payload), which carries the document and
//     well under 2 KiB besides. A declaration larger than that (some
//     80,000 such files) is refused by meshctl declare, naming that limit:
//     it travels only by `mesh-host apply FILE` on the node today (`--local`
//     on an enrolled node: a local override until the mesh reclaims it). The
//     host parses a push with these same limits, after the link's decoder
//     has held it to the message's.
//   - A declaration.received record, whose document and list of resource
//     IDs and spec digests are stored apart in the journal's documents (in
//     chunks of at most 64 KiB), named by digest: the record is a few
//     hundred bytes whatever the declaration's size. The IDs are the
//     resources' paths and names, which the document holds, except that
//     ${version} (10 bytes) expands to 64 hex digits: the list is at most
//     6.4 times MaxBytes, plus about 100 bytes an entry.
//   - A reconcile.started record, whose plan lists every resource created,
//     updated or removed (what is declared and what was owned before):
//     inline up to 64 KiB (agent.MaxInlinePlan), stored apart like the
//     list above when larger.
//   - A record for each resource's outcome or drift, whose ID is bounded
//     by MaxPathBytes and MaxNameBytes to the journal's key (event.MaxName).
//
// So the journal's record limit (journal.MaxPayload, 16 MiB) bounds no
// declaration. The host's memory is what does: parsing 100,000 files
// (10 MB of YAML) and reconciling them to an empty root takes about
// 500 MB resident, a check that finds nothing to do 315 MB (see
// docs/architecture.md, "Scale"); at these limits it is a few times that.
const (
	// MaxBytes bounds a declaration's document, as written and as JSON.
	MaxBytes = 32 << 20
	// MaxResources bounds how many resources a declaration holds.
	MaxResources = 250_000
	// MaxPathBytes bounds a path, with ${version} expanded. A resource's
	// ID is its kind, ":" and its path, and the journal keys records by ID
	// in at most 4096 bytes (event.MaxName), so the longest kind,
	// "directory:", comes off; it is under PATH_MAX (4096 with its NUL).
	MaxPathBytes = 4096 - len("directory:")
	// MaxPathElementBytes bounds each element of a path: NAME_MAX.
	MaxPathElementBytes = 255
	// MaxContentBytes bounds the content of a file or a unit written in
	// the declaration: larger payloads belong in an archive, fetched by
	// digest.
	MaxContentBytes = 512 << 10
	// MaxNameBytes bounds the mesh, the node and every name a resource
	// holds: a package, a unit (a file name: NAME_MAX), an owner, a group.
	MaxNameBytes = 255
	// MaxRelations bounds the IDs a declaration's relations name, all
	// resources together: what checking them for cycles holds in memory.
	MaxRelations = 250_000
)

// The limits as messages name them.
const (
	limitBytes     = "the limit for a declaration"
	limitResources = "the limit of resources in a declaration"
	limitPath      = "the limit for a path"
	limitElement   = "the limit for an element of a path"
	limitContent   = "the limit for content"
	limitName      = "the limit for a name"
	limitID        = "the limit for a resource's ID"
	limitItems     = "the limit of items in a list"
	limitRelations = "the limit of relations in a declaration"
)

// The forms of a declaration tooLarge tells apart.
const (
	asWritten = ""
	asJSON    = "as JSON, the form it travels and is journaled in, "
)

// tooLarge is the error for a document of size bytes over MaxBytes.
func tooLarge(file string, size int, form string) *Error {
	return &Error{File: file, sentinel: ErrLimit,
		Msg: fmt.Sprintf("%sthe declaration is %d bytes, over %s: %d bytes", form, size, limitBytes, MaxBytes)}
}

// checkSize refuses a document over MaxBytes before anything reads it.
func checkSize(name string, data []byte) error {
	if len(data) > MaxBytes {
		return Errors{tooLarge(name, len(data), asWritten)}
	}
	return nil
}

// CheckJSONSize refuses a declaration whose JSON form, doc, is over
// MaxBytes. The parser checks the JSON form of what it parses; meshctl
// checks a declaration again once its secrets are sealed, which makes it
// larger.
func CheckJSONSize(doc []byte) error {
	if len(doc) > MaxBytes {
		return tooLarge("", len(doc), asJSON)
	}
	return nil
}

// over reports a value of size bytes over a limit of most bytes; note, if
// any, says how the size was counted.
func (d *decoder) over(n *yaml.Node, field string, size int, limit string, most int, note string) {
	d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Field: field, sentinel: ErrLimit,
		Msg: fmt.Sprintf("is %d bytes%s, over %s: %d bytes", size, note, limit, most)})
}

// pathLimits checks a path, with ${version} expanded (only an archive's
// path may hold it), against MaxPathBytes and each of its elements against
// MaxPathElementBytes.
func (d *decoder) pathLimits(n *yaml.Node, field, p string) bool {
	expanded := strings.ReplaceAll(p, version, dummyHex)
	note := ""
	if expanded != p {
		note = " with " + version + " expanded"
	}
	if len(expanded) > MaxPathBytes {
		d.over(n, field, len(expanded), limitPath, MaxPathBytes, note)
		return false
	}
	for elem := range strings.SplitSeq(expanded, "/") {
		if len(elem) > MaxPathElementBytes {
			d.errs = append(d.errs, &Error{File: d.file, Line: n.Line, Column: n.Column, Field: field, sentinel: ErrLimit,
				Msg: fmt.Sprintf("the element %s is %d bytes%s, over %s: %d bytes", abbreviate(elem), len(elem), note, limitElement, MaxPathElementBytes)})
			return false
		}
	}
	return true
}

// abbreviate quotes the start of a long value for a message.
func abbreviate(s string) string {
	const keep = 24
	if len(s) <= keep {
		return strconv.Quote(s)
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// sizeLimit is the limit a field's value is held to; a rule's zero value
// holds it to none.
type sizeLimit int

const (
	noLimit sizeLimit = iota
	pathLimit
	contentLimit
	nameLimit
	// argLimit holds each word of an exec's argv and environment to what
	// a file's content may be.
	argLimit = contentLimit
	// relationLimit holds a relation's ID to what the journal keys a
	// resource by.
	relationLimit = nameLimit + 1
)

// sizeOK checks s, the value of the field at path, against its limit. It
// is checked before the field's rule, whose patterns need not run over a
// value already refused.
func (d *decoder) sizeOK(n *yaml.Node, field string, limit sizeLimit, s string) bool {
	switch limit {
	case pathLimit:
		return d.pathLimits(n, field, s)
	case contentLimit:
		if len(s) > MaxContentBytes {
			d.over(n, field, len(s), limitContent, MaxContentBytes, "")
			return false
		}
	case nameLimit:
		if len(s) > MaxNameBytes {
			d.over(n, field, len(s), limitName, MaxNameBytes, "")
			return false
		}
	case relationLimit:
		if most := MaxPathBytes + len("directory:"); len(s) > most {
			d.over(n, field, len(s), limitID, most, "")
			return false
		}
	}
	return true
}

// Read reads a declaration from r and parses it: as JSON when name ends in
// ".json", as YAML otherwise. It reads at most MaxBytes+1 bytes, so that a
// larger input is refused by the limit without being read whole.
func Read(name string, r io.Reader) (*Declaration, error) {
	// A file says its size: read into a buffer of that size rather than
	// one grown by doubling, which holds up to twice the document.
	var buf bytes.Buffer
	if f, ok := r.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			buf.Grow(int(min(fi.Size(), MaxBytes)) + 1)
		}
	}
	if _, err := buf.ReadFrom(io.LimitReader(r, MaxBytes+1)); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	if len(data) > MaxBytes {
		return nil, Errors{{File: name, sentinel: ErrLimit,
			Msg: fmt.Sprintf("the declaration is over %s: %d bytes (it was read no further than %d)", limitBytes, MaxBytes, len(data))}}
	}
	if strings.EqualFold(path.Ext(name), ".json") {
		return ParseJSON(name, data)
	}
	return ParseYAML(name, data)
}
