package journal_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// sample is a journal file written once and damaged in several ways.
type sample struct {
	file   []byte
	used   int // bytes of the file bbolt's pages occupy
	stored []event.Record
}

func writeSample(t *testing.T) sample {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(path, journal.Options{Fold: testFold})
	if err != nil {
		t.Fatal(err)
	}
	var s sample
	for i := range 30 {
		batch := make([]event.Record, 100)
		for k := range batch {
			batch[k] = rec(event.ResourceApplied, 0, fmt.Sprintf("file:/r%d", k%7),
				fmt.Sprintf(`{"action":"unchanged","spec_digest":"%064d"}`, i*100+k))
		}
		s.stored = append(s.stored, mustAppend(t, j, batch...)...)
	}
	s.used = int(info(t, j).Size)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if s.file, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if s.used > len(s.file) || s.used < 20*os.Getpagesize() {
		t.Fatalf("sample uses %d bytes of a %d-byte file, want at least 20 pages", s.used, len(s.file))
	}
	return s
}

// flipIn returns a copy of file with one byte flipped inside the stored
// value of r, at offset off from the value's end.
func flipIn(t *testing.T, file []byte, r event.Record, off int) []byte {
	t.Helper()
	v := event.Encode(r)
	i := bytes.Index(file, v)
	if i < 0 || bytes.Index(file[i+1:], v) >= 0 {
		t.Fatalf("record %d: its value is not in the file exactly once", r.Seq)
	}
	out := bytes.Clone(file)
	out[i+len(v)-off] ^= 0x20
	return out
}

func TestCorruptFile(t *testing.T) {
	s := writeSample(t)
	page := os.Getpagesize()
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	tests := []struct {
		name   string
		damage func() []byte
	}{
		{"cut mid-page in the tail", func() []byte { return s.file[:len(s.file)-page/2] }},
		{"cut mid-page in used pages", func() []byte { return s.file[:s.used-page-100] }},
		{"cut to a page, losing the last", func() []byte { return s.file[:s.used-page] }},
		{"cut to half the pages", func() []byte { return s.file[:s.used/2/page*page] }},
		{"cut to four pages", func() []byte { return s.file[:4*page] }},
		{"cut to the meta pages", func() []byte { return s.file[:2*page] }},
		{"cut to 100 bytes", func() []byte { return s.file[:100] }},
		{"random bytes, whole pages", func() []byte { return random(16 * page) }},
		{"random bytes, odd size", func() []byte { return random(10_000) }},
		{"random pages after valid meta", func() []byte {
			b := bytes.Clone(s.file)
			copy(b[2*page:s.used], random(s.used-2*page))
			return b
		}},
		{"zeroed pages after valid meta", func() []byte {
			b := bytes.Clone(s.file)
			clear(b[2*page : s.used])
			return b
		}},
		{"meta pages zeroed", func() []byte {
			b := bytes.Clone(s.file)
			clear(b[:2*page])
			return b
		}},
		{"flip in a middle record's payload", func() []byte { return flipIn(t, s.file, s.stored[1500], 3) }},
		{"flip in a middle record's kind", func() []byte {
			r := s.stored[700]
			return flipIn(t, s.file, r, len(r.Payload)+len(r.Resource)+2)
		}},
		{"flip in the first record", func() []byte { return flipIn(t, s.file, s.stored[0], 1) }},
		{"flip in the head record", func() []byte { return flipIn(t, s.file, s.stored[len(s.stored)-1], 1) }},
	}
	for _, tt := range tests {
		for _, readOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/readonly=%v", tt.name, readOnly), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "journal.db")
				if err := os.WriteFile(path, tt.damage(), 0o600); err != nil {
					t.Fatal(err)
				}
				err := openAndReadAll(path, readOnly)
				if err == nil {
					t.Fatal("opened and read the whole journal without an error, want ErrCorrupt")
				}
				checkCorruptErr(t, err, path)
			})
		}
	}
}

// openAndReadAll opens path and reads everything: records, indexes,
// projection. It returns the first error; a journal that opens but has lost
// records is an error too.
func openAndReadAll(path string, readOnly bool) error {
	j, err := journal.Open(path, journal.Options{Fold: testFold, ReadOnly: readOnly})
	if err != nil {
		return err
	}
	defer j.Close()
	var n uint64
	if err := j.Scan(0, 0, func(event.Record) error { n++; return nil }); err != nil {
		return err
	}
	for r := range 7 {
		if err := j.ScanResource(fmt.Sprintf("file:/r%d", r), 0, func(event.Record) error { return nil }); err != nil {
			return err
		}
	}
	if err := j.ScanKind(event.ResourceApplied, 0, func(event.Record) error { return nil }); err != nil {
		return err
	}
	in, err := j.Info()
	if err != nil {
		return err
	}
	if _, _, err := projectionOf(j); err != nil {
		return err
	}
	return fmt.Errorf("read %d records, head %d: no error", n, in.Head)
}

func checkCorruptErr(t *testing.T, err error, path string) {
	t.Helper()
	msg := err.Error()
	if !errors.Is(err, journal.ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	for _, want := range []string{path, "To recover", "mv " + path} {
		if !strings.Contains(msg, want) {
			t.Errorf("got message %q, want it to contain %q", msg, want)
		}
	}
}

// A zero-length file where a journal was is damage, in both modes: a
// journal is created whole, so it is a file whose contents were lost, and
// starting over on it would forget what the host owns. Neither open writes
// to it.
func TestOpenZeroLengthFile(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("readonly=%v", readOnly), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			j, err := journal.Open(path, journal.Options{Fold: testFold, ReadOnly: readOnly})
			if err == nil {
				j.Close()
				t.Fatal("open succeeded, want ErrCorrupt")
			}
			checkCorruptErr(t, err, path)
			if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
				t.Errorf("open changed the file: %v", err)
			}
		})
	}
}

// A first start, when there is no file, creates one whole: no empty file is
// ever left where the journal goes, and nothing beside it.
func TestOpenCreatesWhole(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	j := openAt(t, path, journal.Options{Fold: testFold})
	if got := info(t, j); got.Head != 0 || got.First != 0 {
		t.Errorf("got head %d first %d, want an empty journal", got.Head, got.First)
	}
	if out := mustAppend(t, j, rec(event.LinkUp, 0, "", "")); out[0].Seq != 1 {
		t.Errorf("got seq %d, want 1", out[0].Seq)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "journal.db" {
		t.Errorf("got %v in the directory, want journal.db alone", entries)
	}
}

// TestAppendRefusedAfterDamage: once anything found the file damaged (a
// read, the fold, a caller), no record is appended to it, even by a later
// append whose own reads would pass, and the file is left as it was.
func TestAppendRefusedAfterDamage(t *testing.T) {
	s := writeSample(t)
	damagedRecord := flipIn(t, s.file, s.stored[1500], 3)
	tests := []struct {
		name string
		file []byte
		fold func(fail *bool) journal.FoldFunc
		find func(j *journal.Journal) error
	}{
		{"a scan read a damaged record", damagedRecord, nil,
			func(j *journal.Journal) error { return j.Scan(0, 0, func(event.Record) error { return nil }) }},
		{"Check read a damaged record", damagedRecord, nil,
			func(j *journal.Journal) error { return j.Check() }},
		{"the fold found its projection damaged", s.file,
			func(fail *bool) journal.FoldFunc {
				return func(st journal.Store, recs []event.Record) error {
					if *fail {
						*fail = false // the next fold would pass: the journal must remember
						return fmt.Errorf("%w: checksum mismatch", journal.ErrCorrupt)
					}
					return testFold(st, recs)
				}
			},
			func(j *journal.Journal) error {
				_, err := j.Append(rec(event.LinkUp, 0, "", ""))
				return err
			}},
		{"a caller said so", s.file, nil,
			func(j *journal.Journal) error { return j.Damaged(errors.New("projection value fails its checksum")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			if err := os.WriteFile(path, tt.file, 0o600); err != nil {
				t.Fatal(err)
			}
			fail := true
			fold := testFold
			if tt.fold != nil {
				fold = tt.fold(&fail)
			}
			j := openAt(t, path, journal.Options{Fold: fold})
			before, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			err = tt.find(j)
			if err == nil {
				t.Fatal("found no damage")
			}
			checkCorruptErr(t, err, path)
			select {
			case <-j.DamageFound():
			default:
				t.Error("DamageFound is not closed after damage was found")
			}
			if j.Damage() == nil {
				t.Error("Damage is nil after damage was found")
			}
			_, err = j.Append(rec(event.LinkDown, 0, "", ""))
			if err == nil {
				t.Fatal("append after damage was found succeeded")
			}
			checkCorruptErr(t, err, path)
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
				t.Error("the file changed after damage was found")
			}
		})
	}
}

// TestCheckWhileAppending: Check checks what was there when it started and
// takes records appended meanwhile for none of its business, not for damage.
func TestCheckWhileAppending(t *testing.T) {
	j, _ := newJournal(t, journal.Options{Fold: testFold})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			if _, err := j.Append(rec(event.LinkDown, 0, "", "")); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for {
		if err := j.Check(); err != nil {
			t.Fatalf("Check while appending: %v", err)
		}
		select {
		case <-done:
			if j.Damage() != nil {
				t.Errorf("damage noted: %v", j.Damage())
			}
			return
		default:
		}
	}
}
