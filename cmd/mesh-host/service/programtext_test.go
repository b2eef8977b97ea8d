package service

import (
	"bufio"
	"bytes"
	"os"
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
	touchProgramText(t)
	before := programResident(t)
	if before.readOnly < 1<<20 {
		t.Fatalf("%d KiB of this program's read-only pages resident after reading them all: smaps is not read right", before.readOnly>>10)
	}
	if err := releaseProgramText(); err != nil {
		t.Fatal(err)
	}
	after := programResident(t)
	if after.readOnly > before.readOnly/2 {
		t.Errorf("read-only pages resident: %d KiB before, %d KiB after the release", before.readOnly>>10, after.readOnly>>10)
	}
	if initialised != 2 {
		t.Errorf("a variable in the program's data reads %d after the release, want 2", initialised)
	}
	t.Logf("read-only pages resident: %d KiB before, %d KiB after", before.readOnly>>10, after.readOnly>>10)
}

// programFile is the device and inode of this program's file.
func programFile(t *testing.T) (dev, ino uint64) {
	t.Helper()
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &self); err != nil {
		t.Fatal(err)
	}
	return uint64(self.Dev), self.Ino
}

// touchProgramText makes every page of the program's read-only mappings
// resident, as a reconcile that ran much of the program would, by reading
// them through /proc/self/mem (which faults them into this process).
func touchProgramText(t *testing.T) {
	t.Helper()
	dev, ino := programFile(t)
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	found := readOnlyMappingsOf(maps, dev, ino)
	if len(found) == 0 {
		t.Fatal("no read-only mapping of this program's file in /proc/self/maps")
	}
	page := make([]byte, 4096)
	for _, m := range found {
		for at := m.start; at < m.end; at += uintptr(len(page)) {
			if _, err := mem.ReadAt(page, int64(at)); err != nil {
				t.Fatalf("read this program's page at %#x: %v", at, err)
			}
		}
	}
}

type resident struct{ readOnly int64 }

// programResident sums the resident bytes of this program's read-only
// mappings, from /proc/self/smaps, whose mapping lines are those of
// /proc/self/maps.
func programResident(t *testing.T) resident {
	t.Helper()
	dev, ino := programFile(t)
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	var r resident
	var counting bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"):
			counting = len(readOnlyMappingsOf(sc.Bytes(), dev, ino)) == 1
		case counting && len(f) == 3 && f[0] == "Rss:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			r.readOnly += kb << 10
		}
	}
	return r
}
