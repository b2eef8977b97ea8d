package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal/event"
)

// scanChunk bounds how many records one read transaction collects, so a long
// scan or a slow consumer never holds a transaction open across its callback.
const scanChunk = 8192

// Info is what the journal's meta says about itself.
type Info struct {
	Path string `json:"path"`
	// Head is the last sequence appended; 0 for an empty journal.
	Head uint64 `json:"head"`
	// First is the first record still stored (records before it were
	// compacted away); 0 when there are none.
	First uint64 `json:"first"`
	// SnapshotSeq is the sequence the compaction snapshot folds through.
	SnapshotSeq uint64 `json:"snapshot_seq"`
	// Acked is the highest sequence acknowledged upward.
	Acked uint64 `json:"acked"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
}

// Info reports head, first, snapshot and file size.
func (j *Journal) Info() (Info, error) {
	in := Info{Path: j.path}
	err := j.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		in.Head, in.SnapshotSeq, in.Acked = getSeq(meta, keyHead), getSeq(meta, keySnapshotSeq), getSeq(meta, keyAcked)
		if k, _ := tx.Bucket(bucketRecords).Cursor().First(); k != nil {
			in.First = binary.BigEndian.Uint64(k)
		}
		in.Size = tx.Size()
		return nil
	})
	return in, err
}

// Projection returns the stored projection and the head it folds through.
func (j *Journal) Projection() ([]byte, uint64, error) {
	return j.metaBlob(keyProjection, keyHead)
}

// Snapshot returns the compaction snapshot and the sequence it folds through:
// the starting point for a replay when early records were compacted away.
// Both are zero for a journal never compacted.
func (j *Journal) Snapshot() ([]byte, uint64, error) {
	return j.metaBlob(keySnapshot, keySnapshotSeq)
}

func (j *Journal) metaBlob(blob, seq []byte) ([]byte, uint64, error) {
	var b []byte
	var s uint64
	err := j.view(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta == nil {
			return nil
		}
		b, s = bytes.Clone(meta.Get(blob)), getSeq(meta, seq)
		return nil
	})
	return b, s, err
}

// Get returns the record at seq; ok is false when there is none (never
// appended, or compacted away).
func (j *Journal) Get(seq uint64) (r event.Record, ok bool, err error) {
	err = j.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketRecords)
		if b == nil {
			return nil
		}
		v := b.Get(event.Key(seq))
		if v == nil {
			return nil
		}
		r, err = j.decode(event.Key(seq), v)
		ok = err == nil
		return err
	})
	return r, ok, err
}

func (j *Journal) decode(k, v []byte) (event.Record, error) {
	r, err := event.Decode(k, v)
	if err != nil {
		return r, j.corrupt(fmt.Errorf("record %d: %w", binary.BigEndian.Uint64(k), err))
	}
	return r, nil
}

// Scan calls fn for each record with from ≤ seq ≤ to, in order (to = 0 means
// to the end). fn runs outside any transaction; returning an error stops the
// scan with it.
func (j *Journal) Scan(from, to uint64, fn func(event.Record) error) error {
	for {
		var batch []event.Record
		err := j.view(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketRecords)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			for k, v := c.Seek(event.Key(from)); k != nil && len(batch) < scanChunk; k, v = c.Next() {
				if to != 0 && binary.BigEndian.Uint64(k) > to {
					break
				}
				r, err := j.decode(k, v)
				if err != nil {
					return err
				}
				batch = append(batch, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range batch {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(batch) < scanChunk {
			return nil
		}
		from = batch[len(batch)-1].Seq + 1
	}
}

// ScanKind calls fn, in order, for each record of kind k with seq ≥ from.
func (j *Journal) ScanKind(k event.Kind, from uint64, fn func(event.Record) error) error {
	return j.scanIndex(bucketByKind, string(k), from, false, fn)
}

// ScanResource calls fn, in order, for each record about resource with
// seq ≥ from.
func (j *Journal) ScanResource(resource string, from uint64, fn func(event.Record) error) error {
	return j.scanIndex(bucketByResource, resource, from, false, fn)
}

// LatestFor returns the newest record about resource; ok is false for none.
func (j *Journal) LatestFor(resource string) (r event.Record, ok bool, err error) {
	err = j.scanIndex(bucketByResource, resource, 0, true, func(got event.Record) error {
		r, ok = got, true
		return errStop
	})
	if err == errStop {
		err = nil
	}
	return r, ok, err
}

var errStop = fmt.Errorf("stop")

// scanIndex walks the index entries name\x00seq, forward from `from` or
// backward from the newest, and resolves each to its record.
func (j *Journal) scanIndex(bucket []byte, name string, from uint64, backward bool, fn func(event.Record) error) error {
	prefix := append([]byte(name), 0)
	for {
		var batch []event.Record
		err := j.view(func(tx *bolt.Tx) error {
			idx, recs := tx.Bucket(bucket), tx.Bucket(bucketRecords)
			if idx == nil {
				return nil
			}
			c := idx.Cursor()
			var k []byte
			if backward {
				start := ^uint64(0)
				if from != 0 {
					start = from
				}
				sk := indexKey(name, start)
				if k, _ = c.Seek(sk); k == nil {
					k, _ = c.Last()
				} else if !bytes.Equal(k, sk) {
					k, _ = c.Prev()
				}
			} else {
				k, _ = c.Seek(indexKey(name, from))
			}
			for ; k != nil && bytes.HasPrefix(k, prefix) && len(k) == len(prefix)+8 && len(batch) < scanChunk; k = step(c, backward) {
				sk := k[len(prefix):]
				v := recs.Get(sk)
				if v == nil {
					// Compaction drops index entries with their records, in
					// one transaction: a dangling entry is damage.
					return j.corrupt(fmt.Errorf("index %s names record %d, which is missing", bucket, binary.BigEndian.Uint64(sk)))
				}
				r, err := j.decode(sk, v)
				if err != nil {
					return err
				}
				batch = append(batch, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range batch {
			if err := fn(r); err != nil {
				return err
			}
		}
		if len(batch) < scanChunk {
			return nil
		}
		last := batch[len(batch)-1].Seq
		if backward {
			if last <= 1 {
				return nil
			}
			from = last - 1
		} else {
			from = last + 1
		}
	}
}

func step(c *bolt.Cursor, backward bool) []byte {
	if backward {
		k, _ := c.Prev()
		return k
	}
	k, _ := c.Next()
	return k
}

// Chain returns the record at seq and, following each record's Cause, the
// records that led to it, newest first. It stops at a record with no cause
// or at a cause that was compacted away.
func (j *Journal) Chain(seq uint64) ([]event.Record, error) {
	var chain []event.Record
	for seq != 0 {
		r, ok, err := j.Get(seq)
		if err != nil {
			return chain, err
		}
		if !ok {
			break
		}
		chain = append(chain, r)
		if r.Cause >= r.Seq {
			return chain, j.corrupt(fmt.Errorf("record %d names cause %d, not an earlier record", r.Seq, r.Cause))
		}
		seq = r.Cause
	}
	return chain, nil
}

// Follow calls fn for every record with seq ≥ from, in order, then waits for
// more and calls fn for those as they are committed, until ctx ends (it then
// returns ctx.Err()), fn returns an error, or the journal is closed.
// It is woken by commits; it does not poll.
func (j *Journal) Follow(ctx context.Context, from uint64, fn func(event.Record) error) error {
	if from == 0 {
		from = 1
	}
	for {
		changed := j.changed() // before reading, so no commit is missed
		err := j.Scan(from, 0, func(r event.Record) error {
			from = r.Seq + 1
			return fn(r)
		})
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			j.mu.RLock()
			closed := j.closed
			j.mu.RUnlock()
			if closed {
				return ErrClosed
			}
		}
	}
}
