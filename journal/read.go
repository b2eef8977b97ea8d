package journal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
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

// Projection calls fn with the stored projection and the head it folds
// through, inside a read transaction: v is valid only during fn.
func (j *Journal) Projection(fn func(v View, head uint64) error) error {
	return j.viewBucket(bucketProjection, keyHead, fn)
}

// Snapshot calls fn with the compaction snapshot and the sequence it folds
// through: the starting point of a replay once early records were compacted
// away. For a journal never compacted the snapshot is empty at 0. v is valid
// only during fn.
func (j *Journal) Snapshot(fn func(v View, seq uint64) error) error {
	return j.viewBucket(bucketSnapshot, keySnapshotSeq, fn)
}

func (j *Journal) viewBucket(bucket, seqKey []byte, fn func(v View, seq uint64) error) error {
	return j.view(func(tx *bolt.Tx) error {
		meta, b := tx.Bucket(bucketMeta), tx.Bucket(bucket)
		if meta == nil || b == nil {
			// A read-only open of a file nobody has written yet.
			return fn(emptyView{}, 0)
		}
		return fn(b, getSeq(meta, seqKey))
	})
}

type emptyView struct{}

func (emptyView) Get([]byte) []byte                     { return nil }
func (emptyView) ForEach(func(k, v []byte) error) error { return nil }

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
		r, err = j.decode(tx, event.Key(seq), v)
		ok = err == nil
		return err
	})
	return r, ok, err
}

// decode returns the record stored as k, v in tx, as its readers see it
// (expanded: see Options.Expand).
func (j *Journal) decode(tx *bolt.Tx, k, v []byte) (event.Record, error) {
	r, err := j.decodeStored(k, v)
	if err != nil {
		return r, err
	}
	return j.expand(tx, r)
}

// decodeStored returns the record stored as k, v, as it is stored.
func (j *Journal) decodeStored(k, v []byte) (event.Record, error) {
	r, err := event.Decode(k, v)
	if err != nil {
		return r, j.corrupt(fmt.Errorf("record %d: %w", binary.BigEndian.Uint64(k), err))
	}
	return r, nil
}

// decodeChecked is decode for Check: each record is expanded as a reader
// expands it, so that what Options.Expand refuses is found, but with "[]"
// in place of every document, which is only looked up. Check reads every
// document once, by its chunks (checkDocuments); putting back the resource
// list of every declaration in the file, only to find the digests its
// record names, was most of a check's time on a journal of a few large
// declarations.
func (j *Journal) decodeChecked(tx *bolt.Tx, k, v []byte) (event.Record, error) {
	r, err := j.decodeStored(k, v)
	if err != nil {
		return r, err
	}
	return j.expandWith(r, func(sum Sum) ([]byte, error) {
		if b := tx.Bucket(bucketDocuments); b == nil || b.Get(sum[:]) == nil {
			return nil, fmt.Errorf("%w: sha256:%x", ErrNoDocument, sum)
		}
		return []byte("[]"), nil
	})
}

// expand returns r as Options.Expand makes it, reading documents in tx. A
// record that refers to a document that is not there is damage.
func (j *Journal) expand(tx *bolt.Tx, r event.Record) (event.Record, error) {
	return j.expandWith(r, func(sum Sum) ([]byte, error) { return j.readDocument(tx, sum) })
}

// expandWith is expand with document giving each document r names.
func (j *Journal) expandWith(r event.Record, document func(Sum) ([]byte, error)) (event.Record, error) {
	if j.opts.Expand == nil {
		return r, nil
	}
	out, err := j.opts.Expand(r, document)
	if errors.Is(err, ErrNoDocument) {
		return r, j.corrupt(fmt.Errorf("record %d: %w", r.Seq, err))
	}
	if err != nil {
		return r, fmt.Errorf("record %d: %w", r.Seq, err)
	}
	return out, nil
}

// Scan calls fn for each record with from ≤ seq ≤ to, in order (to = 0 means
// to the end). fn runs outside any transaction; returning an error stops the
// scan with it.
func (j *Journal) Scan(from, to uint64, fn func(event.Record) error) error {
	return j.ScanBatches(from, to, func(batch []event.Record) error {
		for _, r := range batch {
			if err := fn(r); err != nil {
				return err
			}
		}
		return nil
	})
}

// ScanBatches is Scan handing over records in batches of up to a few
// thousand, for consumers such as a replay that work faster on slices. The
// slice is fn's to keep.
func (j *Journal) ScanBatches(from, to uint64, fn func([]event.Record) error) error {
	return j.scanBatches(from, to, j.decode, fn)
}

// scanBatches is ScanBatches with decode making each record.
func (j *Journal) scanBatches(from, to uint64, decode func(tx *bolt.Tx, k, v []byte) (event.Record, error), fn func([]event.Record) error) error {
	for {
		var batch []event.Record
		err := j.view(func(tx *bolt.Tx) error {
			b := tx.Bucket(bucketRecords)
			if b == nil {
				return nil
			}
			c := b.Cursor()
			// The records stored run gap-free from the first to head
			// (compaction drops a prefix, between transactions): a key
			// missing or out of place as the scan reads them is damage,
			// found as it is read rather than by a whole read.
			next := from
			if k, _ := c.First(); k != nil {
				next = max(from, binary.BigEndian.Uint64(k))
			}
			for k, v := c.Seek(event.Key(from)); k != nil && len(batch) < scanChunk; k, v = c.Next() {
				if to != 0 && binary.BigEndian.Uint64(k) > to {
					break
				}
				if len(k) == 8 && binary.BigEndian.Uint64(k) != next {
					return j.corrupt(fmt.Errorf("record %d is missing (found %d)", next, binary.BigEndian.Uint64(k)))
				}
				next++
				r, err := decode(tx, k, v)
				if err != nil {
					return err
				}
				batch = append(batch, r)
			}
			// The batch holds copies: what it was read from need not
			// stay resident as the scan sweeps the file.
			releasePages(tx)
			return nil
		})
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		if err := fn(batch); err != nil {
			return err
		}
		if len(batch) < scanChunk {
			return nil
		}
		from = batch[len(batch)-1].Seq + 1
	}
}

// ScanKind calls fn, in order, for each record of kind k with seq ≥ from.
func (j *Journal) ScanKind(k event.Kind, from uint64, fn func(event.Record) error) error {
	return j.scanIndex(bucketByKind, string(k), from, fn)
}

// ScanResource calls fn, in order, for each record about resource with
// seq ≥ from.
func (j *Journal) ScanResource(resource string, from uint64, fn func(event.Record) error) error {
	return j.scanIndex(bucketByResource, resource, from, fn)
}

// scanIndex walks an epoch-grouped index for name, epoch by epoch.
func (j *Journal) scanIndex(bucket []byte, name string, from uint64, fn func(event.Record) error) error {
	return j.scanChunks(from, fn, func(tx *bolt.Tx, from uint64) ([]event.Record, error) {
		head := getSeq(tx.Bucket(bucketMeta), keyHead)
		var batch []event.Record
		for epoch := from >> epochShift; epoch <= head>>epochShift; epoch++ {
			start := max(from, epoch<<epochShift)
			var done bool
			var err error
			if batch, done, err = j.collect(tx, bucket, epochPrefix(name, start), start, batch); err != nil || !done {
				return batch, err
			}
		}
		return batch, nil
	})
}

// LatestFor returns the newest record about resource; ok is false for none.
func (j *Journal) LatestFor(resource string) (r event.Record, ok bool, err error) {
	err = j.view(func(tx *bolt.Tx) error {
		latest := tx.Bucket(bucketLatest)
		if latest == nil {
			return nil
		}
		k := latest.Get([]byte(resource))
		if k == nil {
			return nil
		}
		v := tx.Bucket(bucketRecords).Get(k)
		if len(k) != 8 || v == nil {
			return j.corrupt(fmt.Errorf("the latest record of %q is missing", resource))
		}
		r, err = j.decode(tx, k, v)
		ok = err == nil
		return err
	})
	return r, ok, err
}

var errStop = fmt.Errorf("stop")

// scanChunks calls read in successive read transactions, each returning the
// next records from `from` on (at most scanChunk), and hands them to fn
// outside the transaction, until read returns fewer than scanChunk.
func (j *Journal) scanChunks(from uint64, fn func(event.Record) error, read func(tx *bolt.Tx, from uint64) ([]event.Record, error)) error {
	for {
		var batch []event.Record
		err := j.view(func(tx *bolt.Tx) error {
			if tx.Bucket(bucketMeta) == nil {
				return nil
			}
			var err error
			batch, err = read(tx, from)
			return err
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

// collect appends to batch the records that index entries prefix‖seq name,
// seq ≥ from, until batch holds scanChunk. done reports that the prefix's
// entries ran out before that.
func (j *Journal) collect(tx *bolt.Tx, bucket, prefix []byte, from uint64, batch []event.Record) (_ []event.Record, done bool, _ error) {
	recs, c := tx.Bucket(bucketRecords), tx.Bucket(bucket).Cursor()
	for k, _ := c.Seek(indexKey(prefix, from)); ; k, _ = c.Next() {
		if k == nil || len(k) != len(prefix)+8 || !bytes.HasPrefix(k, prefix) {
			return batch, true, nil
		}
		if len(batch) == scanChunk {
			return batch, false, nil
		}
		sk := k[len(prefix):]
		v := recs.Get(sk)
		if v == nil {
			// Compaction drops index entries with their records, in one
			// transaction: a dangling entry is damage.
			return batch, false, j.corrupt(fmt.Errorf("index %s names record %d, which is missing", bucket, binary.BigEndian.Uint64(sk)))
		}
		r, err := j.decode(tx, sk, v)
		if err != nil {
			return batch, false, err
		}
		batch = append(batch, r)
	}
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

// Check reads every record, verifying each one's checksum and that the
// sequences run gap-free from the first stored to head. Open checks only
// what it can without reading the whole file, and every read checks what
// it reads; the service's scrub and `journal --verify` check the rest. Records appended while it runs are not checked (head is read
// first); a compaction must not run meanwhile, as it drops records.
func (j *Journal) Check() error {
	info, err := j.Info()
	if err != nil {
		return err
	}
	switch {
	case info.Head == 0 && info.First == 0:
		return nil // nothing appended yet
	case info.First == 0:
		// Compaction always leaves its own record behind.
		return j.corrupt(fmt.Errorf("no record is stored but head says %d", info.Head))
	}
	next := info.First
	named := make(map[Sum]uint64) // documents records name → a record naming it
	err = j.scanBatches(info.First, info.Head, j.decodeChecked, func(batch []event.Record) error {
		for _, r := range batch {
			if r.Seq != next {
				return j.corrupt(fmt.Errorf("record %d is missing (found %d)", next, r.Seq))
			}
			next++
			if j.opts.Documents != nil {
				for _, sum := range j.opts.Documents(r) {
					named[sum] = r.Seq
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if next != info.Head+1 {
		return j.corrupt(fmt.Errorf("records end at %d but head says %d", next-1, info.Head))
	}
	return j.checkDocuments(named)
}

// checkDocuments checks every chunk against its digest, once however many
// documents share it, and every document's chunk list: well formed, every
// chunk there, their lengths adding up to the document's. Reassembling
// each document instead would hash shared chunks once per document, and
// every command checks the file. named are documents records name, with
// one such record each: each must be there.
func (j *Journal) checkDocuments(named map[Sum]uint64) error {
	return j.view(func(tx *bolt.Tx) error {
		documents, chunkB := tx.Bucket(bucketDocuments), tx.Bucket(bucketChunks)
		if documents == nil || chunkB == nil {
			// An older file opened read-only: no document is there.
			for sum, seq := range named {
				return j.corrupt(fmt.Errorf("record %d names document %s, which is missing", seq, FormatSum(sum)))
			}
			return nil
		}
		sizes := make(map[Sum]int)
		err := chunkB.ForEach(func(k, v []byte) error {
			if len(k) != len(Sum{}) || SumOf(v) != Sum(k) {
				return j.corrupt(fmt.Errorf("chunk sha256:%x does not match its digest", k))
			}
			sizes[Sum(k)] = len(v)
			return nil
		})
		releasePages(tx) // every chunk was read: all the documents' bytes
		if err != nil {
			return err
		}
		err = documents.ForEach(func(k, list []byte) error {
			if len(k) != len(Sum{}) || len(list) < 8 || (len(list)-8)%len(Sum{}) != 0 {
				return j.corrupt(fmt.Errorf("document sha256:%x: its key or chunk list is malformed", k))
			}
			var total uint64
			for at := 8; at < len(list); at += len(Sum{}) {
				n, ok := sizes[Sum(list[at:at+len(Sum{})])]
				if !ok {
					return j.corrupt(fmt.Errorf("document sha256:%x: chunk sha256:%x is missing", k, list[at:at+len(Sum{})]))
				}
				total += uint64(n)
			}
			if size := binary.BigEndian.Uint64(list); total != size {
				return j.corrupt(fmt.Errorf("document sha256:%x: its chunks make %d bytes, not %d", k, total, size))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for sum, seq := range named {
			if documents.Get(sum[:]) == nil {
				return j.corrupt(fmt.Errorf("record %d names document %s, which is missing", seq, FormatSum(sum)))
			}
		}
		return nil
	})
}

// LatestOfKind returns the newest record of kind k; ok is false for none.
// It walks the by-kind index back from head an epoch at a time, so a kind
// appended recently (a daily record) is found in a few seeks, whatever the
// journal's age; a kind never appended costs a seek per epoch.
func (j *Journal) LatestOfKind(k event.Kind) (r event.Record, ok bool, err error) {
	err = j.view(func(tx *bolt.Tx) error {
		meta, byKind := tx.Bucket(bucketMeta), tx.Bucket(bucketByKind)
		if meta == nil || byKind == nil {
			return nil
		}
		head, first := getSeq(meta, keyHead), getSeq(meta, keySnapshotSeq)+1
		c := byKind.Cursor()
		for epoch := head >> epochShift; ; epoch-- {
			prefix := epochPrefix(string(k), epoch<<epochShift)
			// The last entry of this epoch's prefix: seek past it, step back.
			next := append(bytes.Clone(prefix[:len(prefix)-1]), 1)
			key, _ := c.Seek(next)
			if key == nil {
				key, _ = c.Last()
			} else {
				key, _ = c.Prev()
			}
			if key != nil && len(key) == len(prefix)+8 && bytes.HasPrefix(key, prefix) {
				sk := key[len(prefix):]
				v := tx.Bucket(bucketRecords).Get(sk)
				if v == nil {
					return j.corrupt(fmt.Errorf("index %s names record %d, which is missing", bucketByKind, binary.BigEndian.Uint64(sk)))
				}
				r, err = j.decode(tx, sk, v)
				ok = err == nil
				return err
			}
			if epoch == 0 || epoch<<epochShift < first {
				return nil
			}
		}
	})
	return r, ok, err
}
