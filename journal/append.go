package journal

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Append stores recs in one transaction (one fsync, however many records),
// assigning each the next sequence and the current time, updates the indexes
// and the projection in that same transaction, and wakes followers. It returns
// the records as stored. Either all are stored or none.
//
// A record's Cause must be lower than the sequence it is given: causes point
// back in time.
//
// Append refuses, with the ErrCorrupt found, once anything found the file
// damaged: a read, an earlier append, or a caller through Damaged. The fold
// reports damage to the projection it reads by returning an error wrapping
// ErrCorrupt; the append is then rolled back and refused in the same way.
func (j *Journal) Append(recs ...event.Record) ([]event.Record, error) {
	return j.append(nil, recs)
}

// append is Append, storing docs (see AppendDocuments) in the same
// transaction, and then telling Options.Appended of the records stored:
// after the commit and after the lock, so that what it does never holds up
// a compaction.
func (j *Journal) append(docs [][]byte, recs []event.Record) ([]event.Record, error) {
	out, err := j.commit(docs, recs)
	if err == nil && len(out) > 0 && j.opts.Appended != nil {
		j.opts.Appended(out)
	}
	return out, err
}

// commit stores recs and docs in one transaction.
func (j *Journal) commit(docs [][]byte, recs []event.Record) ([]event.Record, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	if j.opts.ReadOnly {
		return nil, fmt.Errorf("append to %s: opened read-only", j.path)
	}
	if err := j.Damage(); err != nil {
		return nil, err
	}
	for i, r := range recs {
		if err := validate(r); err != nil {
			return nil, fmt.Errorf("%w: record %d of %d: %v", ErrInvalid, i+1, len(recs), err)
		}
	}
	out := make([]event.Record, len(recs))
	copy(out, recs)

	j.mu.RLock() // compaction's reopen takes the write lock
	defer j.mu.RUnlock()
	if j.closed {
		return nil, ErrClosed
	}
	err := guard(j.path, func() error {
		return j.db.Update(func(tx *bolt.Tx) error {
			if err := putDocuments(tx, docs); err != nil {
				return err
			}
			if err := carryAcked(tx.Bucket(bucketMeta), j.ackNoted.Load()); err != nil {
				return err
			}
			return j.appendTx(tx, out)
		})
	})
	if err != nil {
		return nil, j.noteDamage(err)
	}
	if len(recs)+len(docs) >= releaseAfter {
		// j.db directly, not j.view: the read lock is held already, and
		// taking it again would wait behind a compaction waiting for it.
		_ = j.db.View(func(tx *bolt.Tx) error { releasePages(tx); return nil })
	}
	j.wake()
	return out, nil
}

// releaseAfter is how many records (or documents) an append takes to
// have read enough of the file, the pages of the indexes and of the
// projection it rewrote, to give those pages back (releasePages) once
// it commits. A large apply's outcome transactions otherwise leave a
// good share of its peak resident memory mapped from the file; a push's
// few records touch a few pages, and a release would cost them their next
// read's faults.
const releaseAfter = 1000

// appendTx numbers, stamps and stores recs in place, and folds them into the
// projection, inside tx.
func (j *Journal) appendTx(tx *bolt.Tx, out []event.Record) error {
	meta := tx.Bucket(bucketMeta)
	head := getSeq(meta, keyHead)
	now := j.opts.Now().UTC()
	records, byRes, byKind, latest := tx.Bucket(bucketRecords), tx.Bucket(bucketByResource), tx.Bucket(bucketByKind), tx.Bucket(bucketLatest)
	// Sequential keys: tell bbolt to fill pages before splitting them.
	records.FillPercent, byKind.FillPercent = 1.0, 0.9
	for i := range out {
		r := &out[i]
		r.Seq = head + uint64(i) + 1
		r.Time = now
		if r.Cause >= r.Seq {
			return fmt.Errorf("%w: record %d (%s) names cause %d, not an earlier record", ErrInvalid, r.Seq, r.Kind, r.Cause)
		}
		enc := event.Encode(*r)
		if err := records.Put(event.Key(r.Seq), enc); err != nil {
			return err
		}
		// The encoding ends with the payload: the record keeps that copy,
		// which bbolt holds until the commit anyway, so that a batch of
		// records is not in memory twice while it is folded and written.
		if n := len(r.Payload); n > 0 {
			r.Payload = enc[len(enc)-n : len(enc) : len(enc)]
		}
		if err := byKind.Put(indexKey(epochPrefix(string(r.Kind), r.Seq), r.Seq), nil); err != nil {
			return err
		}
		if r.Resource != "" {
			if err := byRes.Put(indexKey(epochPrefix(r.Resource, r.Seq), r.Seq), nil); err != nil {
				return err
			}
			if err := latest.Put([]byte(r.Resource), event.Key(r.Seq)); err != nil {
				return err
			}
		}
	}
	if err := putSeq(meta, keyHead, head+uint64(len(out))); err != nil {
		return err
	}
	if j.opts.Fold == nil {
		return nil
	}
	fold := out
	if j.opts.Expand != nil {
		// The fold sees records as readers do, documents put back; the
		// records are copied only when one is expanded.
		for i := range out {
			r, err := j.expand(tx, out[i])
			if err != nil {
				return err
			}
			if &fold[0] == &out[0] && !samePayload(r.Payload, out[i].Payload) {
				fold = slices.Clone(out)
			}
			fold[i] = r
		}
	}
	if err := j.opts.Fold(tx.Bucket(bucketProjection), fold); errors.Is(err, ErrCorrupt) {
		return j.corrupt(fmt.Errorf("fold projection: %w", err))
	} else if err != nil {
		return fmt.Errorf("fold projection: %w", err)
	}
	return nil
}

// samePayload: a and b are one payload, the same bytes in memory: expand
// changes nothing of a record but its payload, which it replaces when it
// puts a document back.
func samePayload(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func validate(r event.Record) error {
	switch {
	case r.Kind == "":
		return fmt.Errorf("no kind")
	case !validName(string(r.Kind)):
		return fmt.Errorf("kind %q is not a valid name", r.Kind)
	case r.Resource != "" && !validName(r.Resource):
		return fmt.Errorf("resource %q is not a valid name", r.Resource)
	case len(r.Payload) > MaxPayload:
		return fmt.Errorf("payload is %d bytes, over the %d limit", len(r.Payload), MaxPayload)
	case len(r.Payload) > 0 && !json.Valid(r.Payload):
		return fmt.Errorf("payload of %s is not JSON", r.Kind)
	}
	return nil
}

// validName: UTF-8, no NUL (the index separator), bounded.
func validName(s string) bool {
	return len(s) <= event.MaxName && utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
