package event

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"time"
	"unicode/utf8"
)

// The stored form of a record. bbolt does not checksum data pages, so each
// value carries its own CRC: a flipped byte is reported, never folded.
//
//	[0]     format (1)
//	[1:5]   CRC-32C of everything after it
//	[5:13]  seq, big-endian (must equal the key)
//	[13:21] time, Unix nanoseconds, big-endian
//	uvarint cause
//	uvarint len, kind
//	uvarint len, resource
//	payload (JSON) to the end
const (
	formatV1   = 1
	headerSize = 21
)

// MaxName bounds a record's kind and resource, in bytes: Append refuses a
// longer one, and Decode calls a longer length corrupt, so that it cannot
// ask for a huge allocation. Persisted: a version that read a smaller bound
// would call newer records corrupt.
const MaxName = 4096

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Key returns the 8-byte big-endian key for seq, so keys sort by sequence.
func Key(seq uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], seq)
	return k[:]
}

// Encode returns the stored form of r.
func Encode(r Record) []byte {
	b := make([]byte, headerSize, headerSize+3*binary.MaxVarintLen64+len(r.Kind)+len(r.Resource)+len(r.Payload))
	b[0] = formatV1
	binary.BigEndian.PutUint64(b[5:13], r.Seq)
	binary.BigEndian.PutUint64(b[13:21], uint64(r.Time.UnixNano()))
	b = binary.AppendUvarint(b, r.Cause)
	b = binary.AppendUvarint(b, uint64(len(r.Kind)))
	b = append(b, r.Kind...)
	b = binary.AppendUvarint(b, uint64(len(r.Resource)))
	b = append(b, r.Resource...)
	b = append(b, r.Payload...)
	binary.BigEndian.PutUint32(b[1:5], crc32.Checksum(b[5:], castagnoli))
	return b
}

// Decode parses a stored record. key is its bbolt key; a record whose own
// sequence disagrees with its key is corrupt. The returned record does not
// alias b, so it outlives the bbolt transaction b came from.
func Decode(key, b []byte) (Record, error) {
	if len(key) != 8 {
		return Record{}, fmt.Errorf("%w: key is %d bytes, want 8", ErrCorrupt, len(key))
	}
	if len(b) < headerSize {
		return Record{}, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrCorrupt, len(b), headerSize)
	}
	if b[0] != formatV1 {
		return Record{}, fmt.Errorf("%w: unknown format %d", ErrCorrupt, b[0])
	}
	if got, want := crc32.Checksum(b[5:], castagnoli), binary.BigEndian.Uint32(b[1:5]); got != want {
		return Record{}, fmt.Errorf("%w: checksum %08x, stored %08x", ErrCorrupt, got, want)
	}
	r := Record{Seq: binary.BigEndian.Uint64(b[5:13])}
	if k := binary.BigEndian.Uint64(key); k != r.Seq {
		return Record{}, fmt.Errorf("%w: record says seq %d under key %d", ErrCorrupt, r.Seq, k)
	}
	r.Time = time.Unix(0, int64(binary.BigEndian.Uint64(b[13:21]))).UTC()
	rest := b[headerSize:]
	var n int
	if r.Cause, n = uvarint(rest); n <= 0 {
		return Record{}, fmt.Errorf("%w: bad cause", ErrCorrupt)
	}
	rest = rest[n:]
	kind, rest, err := readName(rest, "kind")
	if err != nil {
		return Record{}, err
	}
	r.Kind = Kind(kind)
	if r.Resource, rest, err = readName(rest, "resource"); err != nil {
		return Record{}, err
	}
	if len(rest) > 0 {
		r.Payload = append([]byte(nil), rest...)
	}
	return r, nil
}

func readName(b []byte, field string) (string, []byte, error) {
	l, n := uvarint(b)
	if n <= 0 || l > MaxName || uint64(len(b)-n) < l {
		return "", nil, fmt.Errorf("%w: bad %s length", ErrCorrupt, field)
	}
	s := string(b[n : n+int(l)])
	if !utf8.ValidString(s) {
		return "", nil, fmt.Errorf("%w: %s is not UTF-8", ErrCorrupt, field)
	}
	return s, b[n+int(l):], nil
}

// uvarint reads a uvarint as Encode writes it, in the fewest bytes (n <= 0
// otherwise). binary.Uvarint also takes padded forms such as 0x80 0x00 for 0;
// accepting them would let bytes that Encode never wrote decode as a record
// that re-encodes differently.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, 0
	}
	return v, n
}
