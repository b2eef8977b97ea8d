package journal

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal/event"
)

// TestDamageMark: damage noted leaves a mark that names the file; Open
// refuses the file it names, before bbolt reads it; a mark naming another
// file (the damaged one moved aside) is left by a reader and removed by a
// writer; a new journal starts without one.
func TestDamageMark(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(event.New("test.kind", 0, "", map[string]int{"n": 1})); err != nil {
		t.Fatal(err)
	}
	found := j.Damaged(errors.New("the test found this"))
	j.Close()
	b, err := os.ReadFile(path + MarkSuffix)
	if err != nil {
		t.Fatalf("no mark after damage was noted: %v", err)
	}
	if !strings.HasPrefix(string(b), markHeader) || !strings.Contains(string(b), "the test found this") {
		t.Errorf("the mark says:\n%s", b)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(path, Options{ReadOnly: ro})
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "damage was found in it before") || !strings.Contains(err.Error(), "the test found this") {
			t.Errorf("Open (read-only %v) of the marked file: %v", ro, err)
		}
	}
	if !strings.Contains(found.Error(), path+MarkSuffix+" marks this file") {
		t.Errorf("the recovery message does not name the mark:\n%v", found)
	}

	// Moved aside: the mark is for that file, not the one put in its place.
	if err := os.Rename(path, path+".broken"); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.db")
	o, err := Open(other, Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Close()
	if err := os.Rename(other, path); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only Open of another file under the marked name: %v", err)
	}
	r.Close()
	if _, err := os.Lstat(path + MarkSuffix); err != nil {
		t.Errorf("a reader removed the stale mark: %v", err)
	}
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open of another file under the marked name: %v", err)
	}
	w.Close()
	if _, err := os.Lstat(path + MarkSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a writer left the stale mark: %v", err)
	}

	// A journal created where a mark was left starts without it.
	fresh := filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(fresh+MarkSuffix, b, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := Open(fresh, Options{})
	if err != nil {
		t.Fatalf("Open creating a journal beside a mark: %v", err)
	}
	f.Close()
	if _, err := os.Lstat(fresh + MarkSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a new journal kept a mark: %v", err)
	}
}

// TestScanFindsAGap: a record missing from the middle of the file (its
// key lost to damage) is damage to a scan that reads across it, as it is
// to Check: records run gap-free from the first stored to head.
func TestScanFindsAGap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := j.Append(event.New("test.kind", 0, "", map[string]int{"n": i})); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRecords).Delete(event.Key(5)) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	j, err = Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Scan(6, 0, func(event.Record) error { return nil }); err != nil {
		t.Errorf("a scan after the gap: %v", err)
	}
	err = j.Scan(1, 0, func(event.Record) error { return nil })
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "record 5 is missing") {
		t.Errorf("a scan across the gap: %v, want record 5 missing", err)
	}
}
