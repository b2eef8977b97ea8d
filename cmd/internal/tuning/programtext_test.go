package tuning

import (
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Only the program's own read-only private mappings are released: not
// its data, not another file's pages, not a shared mapping.
func TestReadOnlyMappingsOfTheProgramOnly(t *testing.T) {
	const maps = `00400000-00c00000 r-xp 00000000 fd:01 1234 /usr/bin/mesh-host
00c00000-01400000 r--p 00800000 fd:01 1234 /usr/bin/mesh-host
01400000-01500000 rw-p 01000000 fd:01 1234 /usr/bin/mesh-host
01500000-01600000 rw-p 00000000 00:00 0
7f0000000000-7f0000100000 r--s 00000000 fd:01 99 /var/lib/mesh-host/journal.db
7f0000100000-7f0000200000 r--p 00000000 fd:02 1234 /other/device/same/inode
7f0000200000-7f0000300000 r--p 00000000 fd:01 1235 /usr/lib/other
7f0000300000-7f0000400000 r-xs 00000000 fd:01 1234 /usr/bin/mesh-host
garbage line
7f0000400000 r--p 00000000 fd:01 1234 /usr/bin/mesh-host
`
	got := readOnlyMappingsOf([]byte(maps), unix.Mkdev(0xfd, 0x01), 1234)
	want := []mapping{{0x400000, 0xc00000}, {0xc00000, 0x1400000}}
	if len(got) != len(want) {
		t.Fatalf("found %#v, want %#v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: %#x, want %#x", i, got[i], want[i])
		}
	}
}

// initialised lives in the program file's writable data: releasing that
// mapping would put back the value the file holds.
var initialised = 1

// Releasing the test binary's own text takes its pages out of the
// resident set, the program goes on running from the page cache, and its
// data keeps what was written to it.
func TestReleaseProgramTextLeavesDataAlone(t *testing.T) {
	initialised = 2
	text, err := programText()
	if err != nil {
		t.Fatal(err)
	}
	if len(text) == 0 {
		t.Fatal("no read-only mapping of this program's file in /proc/self/maps")
	}
	touch(t, text)
	before := residentKiB(t, text)
	if before < 1<<10 {
		t.Fatalf("%d KiB of this program's read-only pages resident after reading them all: smaps is not read right", before)
	}
	if err := releaseProgramText(); err != nil {
		t.Fatal(err)
	}
	after := residentKiB(t, text)
	// The code that runs between the release and the count (the runtime,
	// reading smaps) faults its own pages back in: in a test binary as
	// small as this package's, that is some half of its text.
	if after > before*3/4 {
		t.Errorf("read-only pages resident: %d KiB before, %d KiB after the release", before, after)
	}
	if initialised != 2 {
		t.Errorf("a variable in the program's data reads %d after the release, want 2", initialised)
	}
	t.Logf("read-only pages resident: %d KiB before, %d KiB after", before, after)
}

// touch makes every page of the mappings resident, as a reconcile that
// ran much of the program would, by reading them through /proc/self/mem
// (which faults them into this process).
func touch(t *testing.T, text []mapping) {
	t.Helper()
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	page := make([]byte, 4096)
	for _, m := range text {
		for at := m.start; at < m.end; at += uintptr(len(page)) {
			if _, err := mem.ReadAt(page, int64(at)); err != nil {
				t.Fatalf("read this program's page at %#x: %v", at, err)
			}
		}
	}
}

// residentKiB sums the resident KiB of the mappings, from
// /proc/self/smaps: the Rss of each section whose range is one of them.
func residentKiB(t *testing.T, text []mapping) int64 {
	t.Helper()
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	var total int64
	counting := false
	for line := range bytes.Lines(smaps) {
		f := strings.Fields(string(line))
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			lo, hi, _ := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			counting = err1 == nil && err2 == nil && slices.Contains(text, mapping{uintptr(start), uintptr(end)})
		case counting && len(f) == 3 && f[0] == "Rss:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb
		}
	}
	return total
}
