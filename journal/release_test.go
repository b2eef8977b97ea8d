package journal_test

import (
	"bufio"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// residentKB is how much of the file at path this process's mappings hold
// resident, from /proc/self/smaps.
func residentKB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps here (%v): the resident set cannot be read", err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) > 0 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			in = len(fields) >= 6 && fields[5] == path
		case in && len(fields) >= 2 && fields[0] == "Rss:":
			n, _ := strconv.Atoi(fields[1])
			total += n
		}
	}
	return total
}

// Check reads every record and every document: the pages of the file it
// read do not stay in the process's resident set (a journal of some
// megabytes would otherwise be counted as the host's memory, by every
// command and by the service's scrub).
func TestCheckLeavesTheFileOutOfMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps")
	}
	j, path := newJournal(t, journal.Options{})
	payload := `{"note":"` + strings.Repeat("x", 400) + `"}`
	for range 10 {
		batch := make([]event.Record, 2000)
		for i := range batch {
			batch[i] = rec("test.filler", 0, "file:/etc/f"+strconv.Itoa(i), payload)
		}
		mustAppend(t, j, batch...)
	}
	info, err := j.Info()
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Check(); err != nil {
		t.Fatal(err)
	}
	if got, file := residentKB(t, path), int(info.Size/1024); got > file/4 {
		t.Errorf("after Check, %d KB of the %d KB file are resident, want at most a quarter", got, file)
	}
}

// Reading a large document lets go of the file's pages it read: the
// document is a copy, and the caller (a check, a service's reconcile)
// decodes it and goes on with a heap of its own. A small one leaves them.
func TestLargeDocumentLeavesTheFileOutOfMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps")
	}
	j, path := newJournal(t, journal.Options{})
	// Random, so that no two of its chunks are one stored once.
	large := make([]byte, 1<<20)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(large)
	small := []byte(`{"resources":[]}`)
	for _, doc := range [][]byte{large, small} {
		if _, err := j.AppendDocuments([][]byte{doc}, rec("test.document", 0, "", `{}`)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := j.Document(journal.SumOf(large))
	if err != nil || string(got) != string(large) {
		t.Fatalf("the large document read back: %d bytes, %v", len(got), err)
	}
	if kb := residentKB(t, path); kb > 256 {
		t.Errorf("after reading a 1 MiB document, %d KB of the file are resident, want at most 256", kb)
	}
	if _, err := j.Document(journal.SumOf(small)); err != nil {
		t.Fatal(err)
	}
	if kb := residentKB(t, path); kb == 0 {
		t.Errorf("after reading a small document, none of the file is resident: its pages were let go too")
	}
}

// An append of many records lets go of the file's pages it read (the
// indexes and projection it rewrote); an append of a few leaves them, for
// the next small append to find.
func TestLargeAppendLeavesTheFileOutOfMemory(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps")
	}
	j, path := newJournal(t, journal.Options{})
	payload := `{"note":"` + strings.Repeat("x", 400) + `"}`
	batch := func(n, from int) []event.Record {
		recs := make([]event.Record, n)
		for i := range recs {
			recs[i] = rec("test.filler", 0, "file:/etc/f"+strconv.Itoa(from+i), payload)
		}
		return recs
	}
	for k := range 4 {
		mustAppend(t, j, batch(999, k*999)...) // under the threshold: pages stay
	}
	before := residentKB(t, path)
	if before < 256 {
		t.Fatalf("%d KB of the file resident after four appends of 999 records: the test reads the wrong mapping", before)
	}
	mustAppend(t, j, batch(2000, 10_000)...)
	if after := residentKB(t, path); after > before/4 {
		t.Errorf("after an append of 2,000 records %d KB of the file are resident (%d before), want at most a quarter", after, before)
	}
}

// A small journal keeps its pages: dropping them would save little and
// cost every later read a fault.
func TestSmallJournalKeepsItsPages(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/smaps")
	}
	j, path := newJournal(t, journal.Options{})
	mustAppend(t, j, rec("test.filler", 0, "file:/etc/f", `{"note":"small"}`))
	if err := j.Check(); err != nil {
		t.Fatal(err)
	}
	before := residentKB(t, path)
	if before == 0 {
		t.Fatal("none of a journal just read is resident: the test reads the wrong mapping")
	}
	if err := j.Release(); err != nil {
		t.Fatal(err)
	}
	if after := residentKB(t, path); after < before {
		t.Errorf("Release of a small journal dropped its pages: %d KB resident, %d before", after, before)
	}
}
