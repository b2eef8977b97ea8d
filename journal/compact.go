package journal

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Retention defaults, from the journal issue: three months of history, and
// never fewer than the last 100,000 records.
const (
	DefaultWindow   = 90 * 24 * time.Hour
	DefaultKeepLast = 100_000
	// deleteChunk bounds one deleting transaction's size.
	deleteChunk = 50_000
)

// CompactOptions say what compaction may drop.
type CompactOptions struct {
	// Window keeps records younger than this; 0 means DefaultWindow.
	Window time.Duration
	// KeepLast keeps at least this many newest records; 0 means
	// DefaultKeepLast.
	KeepLast uint64
	// RequireAck keeps every record above the acknowledged sequence (see
	// MarkAcked). A host with an upstream link sets it; one with none has
	// nobody to wait for.
	RequireAck bool
}

// CompactResult reports what a compaction did.
type CompactResult struct {
	// Through is the last sequence dropped (and the snapshot's sequence);
	// 0 when nothing was dropped.
	Through    uint64 `json:"through"`
	Dropped    uint64 `json:"dropped"`
	SizeBefore int64  `json:"size_before"`
	SizeAfter  int64  `json:"size_after"`
}

// MarkAcked records that every record up to seq was acknowledged upward,
// in a commit of its own unless the journal holds that mark already. It
// never moves backwards.
func (j *Journal) MarkAcked(seq uint64) error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		return ErrClosed
	}
	return guard(j.path, func() error {
		// Read first: a commit is fsync'd even when it changes nothing,
		// and the mark is often recorded already (NoteAcked).
		var held bool
		err := j.db.View(func(tx *bolt.Tx) error {
			held = seq <= getSeq(tx.Bucket(bucketMeta), keyAcked)
			return nil
		})
		if err != nil || held {
			return err
		}
		return j.db.Update(func(tx *bolt.Tx) error {
			meta := tx.Bucket(bucketMeta)
			if head := getSeq(meta, keyHead); seq > head {
				return fmt.Errorf("acknowledge %d: head is %d", seq, head)
			}
			if seq <= getSeq(meta, keyAcked) {
				return nil
			}
			return putSeq(meta, keyAcked, seq)
		})
	})
}

// NoteAcked notes that every record up to seq was acknowledged upward, for
// the next append to record in its own transaction: a mark of its own
// costs a commit, fsync'd, and a host that sends a push's few records
// upward would commit once for them more than for the push. A mark noted
// and not yet carried is lost when the journal closes; MarkAcked records
// it at once. A seq beyond the head is not carried.
func (j *Journal) NoteAcked(seq uint64) {
	for {
		cur := j.ackNoted.Load()
		if seq <= cur || j.ackNoted.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// carryAcked records the mark noted (NoteAcked) in meta, inside an
// append's transaction, before the append moves the head.
func carryAcked(meta *bolt.Bucket, noted uint64) error {
	if noted <= getSeq(meta, keyAcked) || noted > getSeq(meta, keyHead) {
		return nil
	}
	return putSeq(meta, keyAcked, noted)
}

// Compact drops records older than the window, keeping at least KeepLast and
// (with RequireAck) everything not yet acknowledged. It first stores a
// snapshot of the projection as of the last dropped record, so a replay from
// the snapshot equals a replay from the first record, then deletes, then
// rewrites the file so the freed space goes back to the filesystem (bbolt
// files never shrink by themselves).
//
// Every step is crash-safe: the snapshot is written before anything is
// deleted, deletions in several transactions only remove records the
// snapshot already covers, and the rewrite replaces the file by rename.
func (j *Journal) Compact(o CompactOptions) (CompactResult, error) {
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.KeepLast == 0 {
		o.KeepLast = DefaultKeepLast
	}
	j.compactMu.Lock()
	defer j.compactMu.Unlock()
	var res CompactResult
	info, err := j.Info()
	if err != nil {
		return res, err
	}
	res.SizeBefore, res.SizeAfter = fileSize(j.path), fileSize(j.path)
	through, err := j.cutoff(info, o)
	if err != nil || through == 0 {
		return res, err
	}
	if err := j.snapshotThrough(through); err != nil {
		return res, err
	}
	if res.Dropped, err = j.dropThrough(through); err != nil {
		return res, err
	}
	if err := j.sweepDocuments(); err != nil {
		return res, err
	}
	res.Through = through
	if _, err := j.Append(event.New(event.JournalCompacted, 0, "", event.JournalCompactedPayload{
		Through: through, Dropped: res.Dropped,
	})); err != nil {
		return res, err
	}
	if err := j.rewrite(); err != nil {
		return res, err
	}
	res.SizeAfter = fileSize(j.path)
	return res, nil
}

// cutoff finds the last sequence compaction may drop: older than the window,
// not among the newest KeepLast, acknowledged if required. 0 means none.
func (j *Journal) cutoff(info Info, o CompactOptions) (uint64, error) {
	if info.Head <= o.KeepLast {
		return 0, nil
	}
	limit := info.Head - o.KeepLast
	if o.RequireAck && info.Acked < limit {
		limit = info.Acked
	}
	if limit < info.First || info.First == 0 {
		return 0, nil
	}
	before := j.opts.Now().Add(-o.Window)
	var through uint64
	err := j.Scan(info.First, limit, func(r event.Record) error {
		if !r.Time.Before(before) {
			return errStop
		}
		through = r.Seq
		return nil
	})
	if err != nil && err != errStop {
		return 0, err
	}
	return through, nil
}

// snapshotThrough folds the snapshot forward through seq, in one
// transaction: the snapshot and its sequence move together or not at all.
func (j *Journal) snapshotThrough(seq uint64) error {
	return j.update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		from := getSeq(meta, keySnapshotSeq) + 1
		if seq < from {
			return nil
		}
		if j.opts.Fold != nil {
			snap := tx.Bucket(bucketSnapshot)
			batch := make([]event.Record, 0, scanChunk)
			c := tx.Bucket(bucketRecords).Cursor()
			for k, v := c.Seek(event.Key(from)); ; k, v = c.Next() {
				done := k == nil || binary.BigEndian.Uint64(k) > seq
				if !done {
					r, err := j.decode(tx, k, v)
					if err != nil {
						return err
					}
					batch = append(batch, r)
				}
				if len(batch) == scanChunk || (done && len(batch) > 0) {
					if err := j.opts.Fold(snap, batch); err != nil {
						return fmt.Errorf("fold snapshot: %w", err)
					}
					batch = batch[:0]
				}
				if done {
					break
				}
			}
		}
		return putSeq(meta, keySnapshotSeq, seq)
	})
}

// dropThrough deletes records ≤ seq and their index entries, in bounded
// transactions.
func (j *Journal) dropThrough(seq uint64) (uint64, error) {
	var dropped uint64
	for {
		n := 0
		err := j.update(func(tx *bolt.Tx) error {
			recs, byRes, byKind, latest := tx.Bucket(bucketRecords), tx.Bucket(bucketByResource), tx.Bucket(bucketByKind), tx.Bucket(bucketLatest)
			// Collect the keys, then delete them: deleting through the cursor
			// and seeking First again walks every leaf emptied so far, which
			// made a chunk quadratic (seconds for 200k records).
			var keys [][]byte
			c := recs.Cursor()
			for k, v := c.First(); k != nil && len(keys) < deleteChunk; k, v = c.Next() {
				s := binary.BigEndian.Uint64(k)
				if s > seq {
					break
				}
				r, err := j.decodeStored(k, v)
				if err != nil {
					return err
				}
				if err := byKind.Delete(indexKey(epochPrefix(string(r.Kind), s), s)); err != nil {
					return err
				}
				if r.Resource != "" {
					if err := byRes.Delete(indexKey(epochPrefix(r.Resource, s), s)); err != nil {
						return err
					}
					// A resource untouched for the whole window loses its
					// latest record too.
					if l := latest.Get([]byte(r.Resource)); len(l) == 8 && binary.BigEndian.Uint64(l) == s {
						if err := latest.Delete([]byte(r.Resource)); err != nil {
							return err
						}
					}
				}
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				if err := recs.Delete(k); err != nil {
					return err
				}
			}
			n = len(keys)
			return nil
		})
		dropped += uint64(n)
		if err != nil || n < deleteChunk {
			return dropped, err
		}
	}
}

func (j *Journal) update(fn func(tx *bolt.Tx) error) error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		return ErrClosed
	}
	return guard(j.path, func() error { return j.db.Update(fn) })
}

// rewrite copies the live pages into a new file and renames it over the old
// one, returning freed pages to the filesystem. Appends and reads wait.
func (j *Journal) rewrite() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return ErrClosed
	}
	tmp := j.path + compactSuffix
	_ = os.Remove(tmp)
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: j.opts.Timeout, NoSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("compact %s: %w", j.path, err)
	}
	err = guard(j.path, func() error { return bolt.Compact(dst, j.db, 64<<20) })
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("compact %s: %w", j.path, err)
	}
	if err := j.db.Close(); err != nil {
		return fmt.Errorf("compact %s: close: %w", j.path, err)
	}
	// Whatever happens to the rename, reopen: the path then holds either the
	// old file or the complete copy.
	renameErr := os.Rename(tmp, j.path)
	if renameErr != nil {
		_ = os.Remove(tmp)
	} else {
		renameErr = syncDir(filepath.Dir(j.path))
	}
	db, err := j.open()
	if err != nil {
		j.closed = true
		return fmt.Errorf("compact %s: reopen: %w", j.path, err)
	}
	j.db = db
	if renameErr != nil {
		return fmt.Errorf("compact %s: %w", j.path, renameErr)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
