package projector

import (
	"encoding/binary"
	"errors"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/journal/event"
)

// The stored form of one owned resource (the value of "owned/<id>"). A
// check loads every owned entry of a host that may own ten thousand, so the
// form is binary, not JSON (a tenth of the time to decode):
//
//	[0]      format (2; 1 is read, without the good revision)
//	uvarint  seq
//	uvarint  good revision (format 2)
//	[1]      flags: 1 = drifted
//	uvarint  len, spec digest
//	uvarint  len, last outcome
//	uvarint  len, error
const (
	ownedFormat1 = 1
	ownedFormat  = 2
)

var errOwned = errors.New("malformed owned entry")

func encodeOwned(o Owned) []byte {
	b := make([]byte, 0, 16+len(o.SpecDigest)+len(o.LastOutcome)+len(o.Error))
	b = append(b, ownedFormat)
	b = binary.AppendUvarint(b, o.Seq)
	b = binary.AppendUvarint(b, o.GoodRevision)
	var flags byte
	if o.Drifted {
		flags |= 1
	}
	b = append(b, flags)
	for _, s := range []string{o.SpecDigest, string(o.LastOutcome), o.Error} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func decodeOwned(b []byte) (Owned, error) {
	var o Owned
	p, err := parseOwned(b)
	if err != nil {
		return o, err
	}
	o.Seq, o.GoodRevision, o.Drifted = p.seq, p.good, p.drifted
	o.SpecDigest, o.LastOutcome, o.Error = string(p.fields[0]), event.Action(p.fields[1]), string(p.fields[2])
	return o, nil
}

// parsedOwned is a stored owned entry as parseOwned reads it, its strings
// still the stored bytes: spec digest, last outcome, error.
type parsedOwned struct {
	seq, good uint64
	drifted   bool
	fields    [3][]byte
}

// parseOwned reads and checks the form of a stored owned entry, copying
// nothing.
func parseOwned(b []byte) (parsedOwned, error) {
	var p parsedOwned
	if len(b) < 2 || b[0] != ownedFormat && b[0] != ownedFormat1 {
		return p, errOwned
	}
	format := b[0]
	b = b[1:]
	seq, n := binary.Uvarint(b)
	if n <= 0 || n >= len(b) {
		return p, errOwned
	}
	p.seq, b = seq, b[n:]
	if format == ownedFormat {
		good, n := binary.Uvarint(b)
		if n <= 0 || n >= len(b) {
			return p, errOwned
		}
		p.good, b = good, b[n:]
	}
	if b[0]&^1 != 0 {
		return p, errOwned
	}
	p.drifted, b = b[0]&1 != 0, b[1:]
	for i := range p.fields {
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return p, errOwned
		}
		p.fields[i], b = b[n:n+int(l)], b[n+int(l):]
		if !utf8.Valid(p.fields[i]) {
			return p, errOwned
		}
	}
	if len(b) != 0 {
		return p, errOwned
	}
	return p, nil
}
