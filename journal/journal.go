// Package journal is the host's append-only store: one bbolt file holding every
// record the host appends, an index from resource and from kind to the
// sequences that name them, the projection folded in the same transaction as
// the records, a snapshot that lets old records be compacted away, and the
// documents records refer to, stored once by digest in shared chunks.
//
// It knows the record envelope (package event) but not what records mean: the
// caller passes a Fold hook (in practice projector.Stored) that turns records
// into the stored projection, and says which documents a record refers to
// and what of them to put back as it is read. It is not a general key-value
// store, and nothing outside this package touches bbolt.
package journal

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Errors returned by this package. Each is wrapped with the file's path.
var (
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("journal is held by another process")
	// ErrCorrupt is returned when the file or a record in it cannot be read.
	// The host must stop rather than start over on an empty journal.
	ErrCorrupt = errors.New("journal is corrupt")
	// ErrNotExist is returned by Open in read-only mode when there is no file.
	ErrNotExist = errors.New("journal does not exist")
	// ErrInvalid is returned by Append for a record it will not store.
	ErrInvalid = errors.New("invalid record")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("journal is closed")
)

// Bucket and key names. Persisted: never rename.
var (
	bucketRecords    = []byte("records")     // seq → event.Encode(record)
	bucketByResource = []byte("by-resource") // epoch resource \x00 seq → nil (see epochPrefix)
	bucketLatest     = []byte("latest")      // resource → seq of its newest record
	bucketByKind     = []byte("by-kind")     // epoch kind \x00 seq → nil
	bucketMeta       = []byte("meta")
	bucketProjection = []byte("projection") // the Fold's keys, as of head
	bucketSnapshot   = []byte("snapshot")   // the Fold's keys, as of snapshot-seq

	keyFormat      = []byte("format")       // "1"
	keyHead        = []byte("head")         // seq of the last record appended
	keySnapshotSeq = []byte("snapshot-seq") // records ≤ this were compacted away
	keyAcked       = []byte("acked")        // highest seq acknowledged upward
	fileFormat     = []byte("1")
	allBuckets     = [][]byte{bucketRecords, bucketByResource, bucketLatest, bucketByKind, bucketMeta, bucketProjection, bucketSnapshot}
	defaultTimeout = 2 * time.Second
	compactSuffix  = ".compacting"
)

// MaxPayload bounds one record's payload, in bytes: Append refuses a
// larger one.
const MaxPayload = 16 << 20

// View reads a stored projection: a bbolt bucket, valid only inside the
// callback that is handed it. View and Store are aliases of interface
// literals so that a fold written against identical literals elsewhere
// (projector's, which may not import this package) is a FoldFunc as it is.
type View = interface {
	Get(key []byte) []byte
	ForEach(fn func(k, v []byte) error) error
}

// Store is where a FoldFunc keeps its projection: a bucket of its own, inside
// the append's transaction, so the projection commits with the records or
// not at all. Values it Gets are valid only during the call, and a value it
// Puts must not alias one it Got: the file's pages may move before commit.
type Store = interface {
	View
	Put(key, value []byte) error
	Delete(key []byte) error
}

// FoldFunc folds recs into the projection in st. The projection is keyed so
// that a fold rewrites only what recs change. It is called with the
// journal's write lock held, for appends (st holds the projection as of the
// record before recs) and for compaction's snapshot.
type FoldFunc func(st Store, recs []event.Record) error

// Options configure Open.
type Options struct {
	// Timeout bounds the wait for the file lock; 0 means 2 s.
	Timeout time.Duration
	// ReadOnly opens with a shared lock and refuses to create the file.
	ReadOnly bool
	// Fold maintains the stored projection. Nil keeps none. An error it
	// returns that is ErrCorrupt (errors.Is) is damage to the projection
	// it read: that append and every later one are refused.
	Fold FoldFunc
	// Now stamps appended records; nil means time.Now.
	Now func() time.Time
	// Documents lists the documents (see AppendDocuments) a record refers
	// to, given the record as stored or as expanded, and StoredDocuments
	// those the Fold's stored projection or snapshot refers to.
	// Compaction keeps these and drops the rest, in one transaction that
	// reads every record; with Documents nil it drops none. Check finds a
	// record naming a document that is not there.
	Documents       func(r event.Record) []Sum
	StoredDocuments func(v View) ([]Sum, error)
	// Optional lists documents a record refers to that compaction keeps
	// as it keeps Documents, but whose absence is not damage: a version
	// that did not know to keep them (a host rolled back, which compacts
	// with its own Options) may have dropped them. Check does not require
	// them, and Expand is told ErrNoDocument for one that is gone.
	Optional func(r event.Record) []Sum
	// Expand, when set, turns a record as stored into the record its
	// readers see, given its documents: a caller that stores part of a
	// payload apart (AppendDocuments, Documents) puts it back here. Every
	// read (Get, Scan, Follow and the rest) and every Fold sees records
	// expanded; Append returns them as stored. It changes nothing of a
	// record but its payload, and returns the payload it was given when
	// it puts nothing back. A document it asks for that is not there is
	// damage.
	Expand func(r event.Record, document func(Sum) ([]byte, error)) (event.Record, error)
	// Appended, when set, is told of every append once it has committed,
	// with the records as stored (numbered and stamped, documents not put
	// back), in the order they were stored: what counts the host's own
	// doings as they happen, rather than reading them back. It is called
	// outside the journal's locks, but on the appender's goroutine, so it
	// must be quick; it must neither keep nor change recs, and must not
	// append. Appends from several goroutines may call it concurrently.
	Appended func(recs []event.Record)
}

// Journal is an open journal file. Its methods are safe for concurrent use.
type Journal struct {
	path string
	opts Options

	mu     sync.RWMutex // guards db across compaction's reopen
	db     *bolt.DB
	closed bool

	notifyMu sync.Mutex
	notify   chan struct{} // closed and replaced on every commit

	// compactMu runs one compaction at a time: two would each fold a
	// snapshot from what they read before the other dropped records.
	compactMu sync.Mutex

	// damage is the first damage found in the file (ErrCorrupt, with the
	// recovery message), by a read, an append's fold, or a caller (see
	// Damaged). Once set, Append refuses: nothing is added to a file known
	// to be damaged.
	damage      atomic.Pointer[error]
	damageFound chan struct{} // closed when damage is set

	// ackNoted is the acknowledged mark noted for the next append to
	// record (NoteAcked).
	ackNoted atomic.Uint64
}

// Open opens or creates the journal at path.
func Open(path string, opts Options) (*Journal, error) {
	if opts.Timeout == 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	j := &Journal{path: path, opts: opts, notify: make(chan struct{}), damageFound: make(chan struct{})}
	db, err := j.open()
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			writeMark(path, err)
		}
		return nil, err
	}
	j.db = db
	return j, nil
}

func (j *Journal) open() (*bolt.DB, error) {
	_, err := os.Stat(j.path)
	switch {
	case err == nil:
		// Before bbolt reads a page: damage found once stops every
		// command, whatever it would read.
		if err := checkMark(j.path, j.opts.ReadOnly); err != nil {
			return nil, err
		}
	case errors.Is(err, os.ErrNotExist) && j.opts.ReadOnly:
		return nil, fmt.Errorf("%w: %s", ErrNotExist, j.path)
	case errors.Is(err, os.ErrNotExist):
		// Only a missing file is a first start.
		if err := create(j.path, j.opts.Timeout); err != nil {
			return nil, err
		}
	}
	if err := checkSize(j.path); err != nil {
		return nil, err
	}
	var db *bolt.DB
	err = guard(j.path, func() error {
		var err error
		db, err = bolt.Open(j.path, 0o600, &bolt.Options{
			Timeout:        j.opts.Timeout,
			ReadOnly:       j.opts.ReadOnly,
			FreelistType:   bolt.FreelistMapType,
			NoFreelistSync: false,

			// A writer's open reads the freelist's page; a reader's
			// would not, and would answer from a file no writer can
			// open. One page (and a map of the free pages, which a
			// writer holds anyway).
			PreLoadFreelist: true,
		})
		return err
	})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%w: %s: waited %s for its lock; is `mesh-host serve` running? Ask it (the CLI does so over its socket) or stop it first",
			ErrLocked, j.path, j.opts.Timeout)
	case errors.Is(err, ErrCorrupt):
		return nil, err
	case isSystemError(err):
		// Permissions, a full disk, a directory in the way: the file may be
		// fine, and moving it aside would be the wrong advice.
		return nil, fmt.Errorf("open journal %s: %w", j.path, err)
	case err != nil:
		return nil, j.corrupt(err)
	}
	if err := guard(j.path, func() error { return j.initAndCheck(db) }); err != nil {
		db.Close()
		return nil, err
	}
	if !j.opts.ReadOnly {
		// A compaction that crashed before its rename leaves its copy behind;
		// the original is intact, so the copy is only garbage. Only now that
		// we hold the lock: before, the copy may be a live compaction's.
		_ = os.Remove(j.path + compactSuffix)
	}
	return db, nil
}

// create makes a new journal at path, whole or not at all: it is written
// under another name, then linked into place. A crash inside bbolt's first
// Open would otherwise leave an empty file, which a later open must take for
// lost contents. Linking rather than renaming refuses to replace a file
// another process created meanwhile; that one is then opened as it is.
func create(path string, timeout time.Duration) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create journal directory: %w", err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".new-*")
	if err != nil {
		return fmt.Errorf("create journal %s: %w", path, err)
	}
	tmp := f.Name()
	f.Close()
	defer os.Remove(tmp)
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("create journal %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range append(allBuckets, laterBuckets...) {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketMeta).Put(keyFormat, fileFormat)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("create journal %s: %w", path, err)
	}
	switch err := os.Link(tmp, path); {
	case err == nil:
		clearMark(path)
	case !errors.Is(err, os.ErrExist):
		return fmt.Errorf("create journal %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("create journal %s: %w", path, err)
	}
	return nil
}

// checkSize refuses a file too short to hold bbolt's two meta pages or whose
// length is not a whole number of pages: bbolt would map it and fault later.
func checkSize(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("stat journal: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("open journal %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if fi.Size() == 0 {
		// bbolt would initialise it as a new journal. But a journal is
		// created whole (see create), so an empty file is one whose
		// contents were lost: starting over would forget the host's
		// history and everything it owns.
		return corruptErr(path, errors.New("file is empty: its contents were lost (a first start is when there is no file at all)"))
	}
	page := int64(os.Getpagesize())
	switch {
	case fi.Size()%page != 0:
		return corruptErr(path, fmt.Errorf("file is %d bytes, not a whole number of %d-byte pages (truncated?)", fi.Size(), page))
	case fi.Size() < 4*page:
		return corruptErr(path, fmt.Errorf("file is %d bytes, shorter than the four pages every journal has (truncated?)", fi.Size()))
	}
	return nil
}

// initAndCheck creates the buckets of a new file and, for an existing one,
// checks what can be checked without reading every page: the buckets, the
// format, that head's record is there and decodes, and that the file is long
// enough for every page bbolt says it uses.
func (j *Journal) initAndCheck(db *bolt.DB) error {
	var fresh bool
	_ = db.View(func(tx *bolt.Tx) error { fresh = tx.Bucket(bucketMeta) == nil; return nil })
	// Only a new file is written here: a write transaction commits (two
	// fsyncs) even when it changes nothing, and every command opens.
	if fresh && !j.opts.ReadOnly {
		err := db.Update(func(tx *bolt.Tx) error {
			for _, b := range append(allBuckets, laterBuckets...) {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return tx.Bucket(bucketMeta).Put(keyFormat, fileFormat)
		})
		if err != nil {
			return j.corrupt(err)
		}
	}
	err := db.View(func(tx *bolt.Tx) error {
		if fi, err := os.Stat(j.path); err == nil && tx.Size() > fi.Size() {
			return j.corrupt(fmt.Errorf("file is %d bytes but its pages need %d (truncated?)", fi.Size(), tx.Size()))
		}
		for _, b := range allBuckets {
			if tx.Bucket(b) == nil {
				if j.opts.ReadOnly && tx.Bucket(bucketMeta) == nil && tx.Bucket(bucketRecords) == nil {
					return nil // a new file nobody has written yet
				}
				return j.corrupt(fmt.Errorf("bucket %q is missing", b))
			}
		}
		if f := tx.Bucket(bucketMeta).Get(keyFormat); !bytes.Equal(f, fileFormat) {
			return j.corrupt(fmt.Errorf("unknown file format %q", f))
		}
		head := getSeq(tx.Bucket(bucketMeta), keyHead)
		snap := getSeq(tx.Bucket(bucketMeta), keySnapshotSeq)
		if head > snap {
			v := tx.Bucket(bucketRecords).Get(event.Key(head))
			if v == nil {
				return j.corrupt(fmt.Errorf("head record %d is missing", head))
			}
			if _, err := event.Decode(event.Key(head), v); err != nil {
				return j.corrupt(fmt.Errorf("head record %d: %w", head, err))
			}
		}
		if k, _ := tx.Bucket(bucketRecords).Cursor().Last(); k != nil && binary.BigEndian.Uint64(k) != head {
			return j.corrupt(fmt.Errorf("last record is %d but head says %d", binary.BigEndian.Uint64(k), head))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !fresh && !j.opts.ReadOnly {
		// A file from before a bucket was added gains it, empty: nothing
		// in it can refer to what was not there. Written only then, as
		// every command opens.
		var missing bool
		_ = db.View(func(tx *bolt.Tx) error {
			for _, b := range laterBuckets {
				missing = missing || tx.Bucket(b) == nil
			}
			return nil
		})
		if missing {
			err := db.Update(func(tx *bolt.Tx) error {
				for _, b := range laterBuckets {
					if _, err := tx.CreateBucketIfNotExists(b); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return j.corrupt(err)
			}
		}
	}
	return nil
}

// Path is the file the journal lives in.
func (j *Journal) Path() string { return j.path }

// Close releases the file. Followers return ErrClosed.
func (j *Journal) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return nil
	}
	j.closed = true
	j.wake()
	return j.db.Close()
}

// corrupt is err as damage to this file, remembered so Append refuses.
func (j *Journal) corrupt(err error) error { return j.noteDamage(corruptErr(j.path, err)) }

// Damaged returns err, which a caller found in what the journal stored (a
// projection value that fails its checksum, say: the journal stores the
// projection but cannot read it), as damage to the file: ErrCorrupt with
// the recovery message. From then on Append refuses. An err that already
// says so is returned as it is.
func (j *Journal) Damaged(err error) error {
	var d *damageError
	if errors.As(err, &d) {
		return j.noteDamage(err)
	}
	return j.corrupt(err)
}

// noteDamage remembers err, which is ErrCorrupt, when it is the first, and
// returns it.
func (j *Journal) noteDamage(err error) error {
	if errors.Is(err, ErrCorrupt) && j.damage.CompareAndSwap(nil, &err) {
		close(j.damageFound)
		writeMark(j.path, err)
	}
	return err
}

// Damage returns the first damage found in the file so far (ErrCorrupt,
// with the recovery message), or nil.
func (j *Journal) Damage() error {
	if p := j.damage.Load(); p != nil {
		return *p
	}
	return nil
}

// DamageFound is closed when damage is first found in the file, by
// whatever read it: a service stops then, whichever of its parts it was.
func (j *Journal) DamageFound() <-chan struct{} { return j.damageFound }

func corruptErr(path string, err error) error { return &damageError{path: path, err: err} }

// damageError is ErrCorrupt for one file: what was found, and how to
// recover. Every damage found says the same.
type damageError struct {
	path string
	err  error
	// marked is damage read from the file's mark: nothing new to mark.
	marked bool
}

func (e *damageError) Error() string {
	// No command reads a damaged file to the end, replay included, so the
	// broken file is kept as evidence, not as something to replay.
	return fmt.Sprintf("%v: %s: %v\n"+
		"The host will not run on, report from or append to a journal it cannot read, and will not start over empty.\n"+
		"To recover: stop mesh-host, move the file aside (mv %s %s.broken), and start again;\n"+
		"the host re-converges from its next declaration. Keep the broken file: it holds the host's history up to the damage.\n"+
		"Until then every command stops here: %s%s marks this file as damaged, and is for it alone, so moving the file aside clears it\n"+
		"(as does a copy restored beside it and renamed into place: cp BACKUP %s.restored && mv %s.restored %s).",
		ErrCorrupt, e.path, e.err, e.path, e.path, e.path, MarkSuffix, e.path, e.path, e.path)
}

func (e *damageError) Is(target error) bool { return target == ErrCorrupt }
func (e *damageError) Unwrap() error        { return e.err }

// guard runs fn turning a panic or a memory fault inside bbolt, which is how
// bbolt reacts to some corrupted pages, into ErrCorrupt.
func guard(path string, fn func() error) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if p := recover(); p != nil {
			err = corruptErr(path, fmt.Errorf("reading the file failed: %v", p))
		}
	}()
	return fn()
}

// view runs fn in a read transaction, guarded.
func (j *Journal) view(fn func(tx *bolt.Tx) error) error {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.closed {
		return ErrClosed
	}
	return j.noteDamage(guard(j.path, func() error { return j.db.View(fn) }))
}

func getSeq(b *bolt.Bucket, key []byte) uint64 {
	v := b.Get(key)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

func putSeq(b *bolt.Bucket, key []byte, seq uint64) error { return b.Put(key, event.Key(seq)) }

// indexKey is an index entry: the entry's prefix, then the record's seq.
func indexKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, 0, len(prefix)+8)
	k = append(k, prefix...)
	return append(k, event.Key(seq)...)
}

// epochShift groups both indexes into epochs of 256 sequences: an entry's
// key is its epoch, then the name (resource or kind), then its sequence.
// Keyed by name alone, an append lands in the middle of the index, once
// per name: a reconcile of a thousand resources would dirty a page per
// resource once each had a page of history (megabytes written a
// reconcile), and
// a quiet timer record splits the by-kind pages a large batch packed. By
// epoch first, what one append adds lands together at the end.
const epochShift = 8

// epochPrefix is an index's prefix for name in the epoch holding seq.
func epochPrefix(name string, seq uint64) []byte {
	p := make([]byte, 8, 8+len(name)+1)
	binary.BigEndian.PutUint64(p, seq>>epochShift)
	p = append(p, name...)
	return append(p, 0)
}

// wake tells every follower that something changed.
func (j *Journal) wake() {
	j.notifyMu.Lock()
	close(j.notify)
	j.notify = make(chan struct{})
	j.notifyMu.Unlock()
}

func (j *Journal) changed() <-chan struct{} {
	j.notifyMu.Lock()
	defer j.notifyMu.Unlock()
	return j.notify
}

// isSystemError reports whether err came from the operating system rather
// than from reading the file's contents.
func isSystemError(err error) bool {
	var pe *fs.PathError
	var errno syscall.Errno
	return errors.As(err, &pe) || errors.As(err, &errno)
}
