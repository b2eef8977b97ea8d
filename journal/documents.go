package journal

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Documents are byte strings that records refer to by their SHA-256
// instead of carrying them: stored once however many records name them,
// in content-defined chunks, each stored once too. A document that differs
// from one already stored in a few bytes adds about one chunk and its
// chunk list. The journal does not know what a document is; its caller
// says which documents a record, the projection or the snapshot refers to
// (Options.Documents, Options.StoredDocuments), and compaction drops the
// others.
//
//	documents   sha256(document) → length (8 bytes, big-endian), then the
//	            sha256 of each chunk in order (32 bytes each)
//	chunks      sha256(chunk) → chunk
//
// Both buckets came after the first files: an older file gains them, empty,
// when it is first opened for writing.
var (
	bucketDocuments = []byte("documents")
	bucketChunks    = []byte("chunks")
	laterBuckets    = [][]byte{bucketDocuments, bucketChunks}
)

// ErrNoDocument is returned by Document for a digest the journal does not
// hold: never stored, or dropped by compaction once nothing referred to it.
var ErrNoDocument = errors.New("no such document")

// Sum is a document's digest: the SHA-256 of its bytes.
type Sum = [sha256.Size]byte

// SumOf returns the digest of doc.
func SumOf(doc []byte) Sum { return sha256.Sum256(doc) }

// FormatSum writes sum as "sha256:" and its hex, as records name
// documents.
func FormatSum(sum Sum) string { return "sha256:" + hex.EncodeToString(sum[:]) }

// ParseSum reads what FormatSum wrote; false for anything else.
func ParseSum(s string) (Sum, bool) {
	var sum Sum
	h, ok := strings.CutPrefix(s, "sha256:")
	if !ok || len(h) != hex.EncodedLen(len(sum)) {
		return sum, false
	}
	if _, err := hex.Decode(sum[:], []byte(h)); err != nil {
		return sum, false
	}
	return sum, true
}

// Chunk bounds, in bytes. A boundary falls where the rolling hash of the
// last 64 bytes has its high bits clear, at least minChunk after the last
// one, so that an insertion moves the boundaries only around itself; a run
// with no such place is cut at maxChunk. Changing them only changes which
// chunks later documents share with earlier ones, never what is read.
const (
	minChunk  = 16 << 10
	maxChunk  = 64 << 10
	chunkBits = 14 // a boundary every 16 KiB after minChunk, on average
)

// gear is the rolling hash's table: 256 fixed pseudo-random values
// (splitmix64 from 0), so that boundaries are the same in every version.
var gear = func() (t [256]uint64) {
	var x uint64
	for i := range t {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		t[i] = z ^ (z >> 31)
	}
	return t
}()

// chunks splits doc at content-defined boundaries.
func chunks(doc []byte) [][]byte {
	var out [][]byte
	for len(doc) > 0 {
		n := cut(doc)
		out = append(out, doc[:n])
		doc = doc[n:]
	}
	return out
}

// cut returns the length of doc's first chunk.
func cut(doc []byte) int {
	if len(doc) <= minChunk {
		return len(doc)
	}
	end := min(len(doc), maxChunk)
	var h uint64
	// The hash reaches back 64 bytes: start it there, so a boundary
	// depends only on the bytes around it.
	for i := minChunk - 64; i < end; i++ {
		h = h<<1 + gear[doc[i]]
		// The high bits: the low ones depend on the last few bytes only.
		if i >= minChunk && h>>(64-chunkBits) == 0 {
			return i + 1
		}
	}
	return end
}

// AppendDocuments is Append, with docs stored in the same transaction as
// the records that refer to them: a record is never stored without the
// documents it names, even across a crash. A document or chunk already
// stored is not stored again.
func (j *Journal) AppendDocuments(docs [][]byte, recs ...event.Record) ([]event.Record, error) {
	return j.append(docs, recs)
}

// putDocuments stores docs and their chunks inside tx.
func putDocuments(tx *bolt.Tx, docs [][]byte) error {
	if len(docs) == 0 {
		return nil
	}
	documents, chunkB := tx.Bucket(bucketDocuments), tx.Bucket(bucketChunks)
	if documents == nil || chunkB == nil {
		return fmt.Errorf("store a document: the file has no %s bucket (opened read-only?)", bucketDocuments)
	}
	for _, doc := range docs {
		sum := sha256.Sum256(doc)
		if documents.Get(sum[:]) != nil {
			continue
		}
		cs := chunks(doc)
		list := make([]byte, 8, 8+len(cs)*sha256.Size)
		binary.BigEndian.PutUint64(list, uint64(len(doc)))
		for _, c := range cs {
			csum := sha256.Sum256(c)
			list = append(list, csum[:]...)
			if chunkB.Get(csum[:]) != nil {
				continue
			}
			if err := chunkB.Put(csum[:], c); err != nil {
				return err
			}
		}
		if err := documents.Put(sum[:], list); err != nil {
			return err
		}
	}
	return nil
}

// Document returns the document whose SHA-256 is sum, reassembled from its
// chunks and checked against sum. A document whose chunks are missing or do
// not add up to it is damage (ErrCorrupt).
func (j *Journal) Document(sum Sum) ([]byte, error) {
	var doc []byte
	err := j.view(func(tx *bolt.Tx) error {
		var err error
		doc, err = j.readDocument(tx, sum)
		if len(doc) > releaseAfterDocument {
			// doc is a copy: the pages it was read from need not stay
			// resident while it is decoded and reconciled, a share of
			// a large check's peak.
			releasePages(tx)
		}
		return err
	})
	return doc, err
}

// releaseAfterDocument is the size of a document past which reading it
// lets go of the file's pages read so far: a smaller one's pages cost less
// than reading again the others that would go with them.
const releaseAfterDocument = 256 << 10

func (j *Journal) readDocument(tx *bolt.Tx, sum Sum) ([]byte, error) {
	documents, chunkB := tx.Bucket(bucketDocuments), tx.Bucket(bucketChunks)
	if documents == nil {
		return nil, fmt.Errorf("%w: sha256:%x", ErrNoDocument, sum)
	}
	list := documents.Get(sum[:])
	if list == nil {
		return nil, fmt.Errorf("%w: sha256:%x", ErrNoDocument, sum)
	}
	if len(list) < 8 || (len(list)-8)%sha256.Size != 0 {
		return nil, j.corrupt(fmt.Errorf("document sha256:%x: its chunk list is %d bytes", sum, len(list)))
	}
	size := binary.BigEndian.Uint64(list)
	if size > uint64(len(list)-8)/sha256.Size*maxChunk {
		return nil, j.corrupt(fmt.Errorf("document sha256:%x: %d bytes cannot be in %d chunks", sum, size, (len(list)-8)/sha256.Size))
	}
	doc := make([]byte, 0, size)
	for at := 8; at < len(list); at += sha256.Size {
		c := chunkB.Get(list[at : at+sha256.Size])
		if c == nil {
			return nil, j.corrupt(fmt.Errorf("document sha256:%x: chunk sha256:%x is missing", sum, list[at:at+sha256.Size]))
		}
		doc = append(doc, c...)
	}
	if got := sha256.Sum256(doc); uint64(len(doc)) != size || got != sum {
		return nil, j.corrupt(fmt.Errorf("document sha256:%x: its chunks make %d bytes with sha256:%x", sum, len(doc), got))
	}
	return doc, nil
}

// DocumentStats counts what the documents take in the file.
type DocumentStats struct {
	Documents  int   `json:"documents"`
	Chunks     int   `json:"chunks"`
	ChunkBytes int64 `json:"chunk_bytes"`
	ListBytes  int64 `json:"list_bytes"` // the documents' chunk lists
}

// DocumentStats counts the documents and chunks stored.
func (j *Journal) DocumentStats() (DocumentStats, error) {
	var st DocumentStats
	err := j.view(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketDocuments); b != nil {
			_ = b.ForEach(func(_, v []byte) error { st.Documents++; st.ListBytes += int64(len(v)); return nil })
		}
		if b := tx.Bucket(bucketChunks); b != nil {
			_ = b.ForEach(func(_, v []byte) error { st.Chunks++; st.ChunkBytes += int64(len(v)); return nil })
		}
		return nil
	})
	return st, err
}

// sweepDocuments drops the documents that no record, nor the projection,
// nor the snapshot refers to, and the chunks no remaining document holds,
// in one transaction: an append waits for it, so a document it stores
// with its record is kept. Without Options.Documents the journal cannot
// tell what is referred to, and keeps every document.
func (j *Journal) sweepDocuments() error {
	if j.opts.Documents == nil {
		return nil
	}
	return j.update(func(tx *bolt.Tx) error {
		documents, chunkB := tx.Bucket(bucketDocuments), tx.Bucket(bucketChunks)
		if documents == nil || documents.Stats().KeyN == 0 {
			return nil
		}
		live := make(map[Sum]bool)
		c := tx.Bucket(bucketRecords).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			r, err := j.decodeStored(k, v)
			if err != nil {
				return err
			}
			for _, s := range j.opts.Documents(r) {
				live[s] = true
			}
			if j.opts.Optional != nil {
				for _, s := range j.opts.Optional(r) {
					live[s] = true
				}
			}
		}
		if j.opts.StoredDocuments != nil {
			for _, b := range [][]byte{bucketProjection, bucketSnapshot} {
				sums, err := j.opts.StoredDocuments(tx.Bucket(b))
				if err != nil {
					return fmt.Errorf("documents of the stored %s: %w", b, err)
				}
				for _, s := range sums {
					live[s] = true
				}
			}
		}
		liveChunks := make(map[Sum]bool)
		var dead [][]byte
		err := documents.ForEach(func(k, v []byte) error {
			if len(k) == sha256.Size && live[Sum(k)] {
				for at := 8; at+sha256.Size <= len(v); at += sha256.Size {
					liveChunks[Sum(v[at:at+sha256.Size])] = true
				}
				return nil
			}
			dead = append(dead, bytes.Clone(k))
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := documents.Delete(k); err != nil {
				return err
			}
		}
		dead = dead[:0]
		err = chunkB.ForEach(func(k, _ []byte) error {
			if len(k) != sha256.Size || !liveChunks[Sum(k)] {
				dead = append(dead, bytes.Clone(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range dead {
			if err := chunkB.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}
