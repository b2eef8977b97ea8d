package tuning

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// releaseProgramText drops from the resident set the pages of the
// program's own file that it maps read-only: its code and constant data.
// A reconcile runs most of the program (parsing, planning, the drivers,
// the journal's writers), and each page of code it ran stays counted as
// the service's memory until the kernel needs it back: more than half of
// what an idle host holds after a large reconcile (docs/performance.md).
// Between reconciles the service runs a small part of it (timers,
// heartbeats, the link).
//
// The pages stay in the page cache; the code that runs next faults its
// pages back in from there, as after the kernel's own reclaim, which
// drops the same clean pages the same way. Writable mappings (initialised
// data) are never touched: dropping them would put back the file's
// values. madvise's errors are ignored, as in journal.Release: nothing
// depends on them.
func releaseProgramText() error {
	text, err := programText()
	if err != nil {
		return err
	}
	for _, m := range text {
		_, _, _ = unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, uintptr(unix.MADV_DONTNEED))
	}
	return nil
}

type mapping struct{ start, end uintptr }

// programText is this process's read-only private mappings of its own
// file (/proc/self/exe), from /proc/self/maps.
func programText() ([]mapping, error) {
	var self unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &self); err != nil {
		return nil, fmt.Errorf("program text: %w", err)
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("program text: %w", err)
	}
	return readOnlyMappingsOf(maps, uint64(self.Dev), self.Ino), nil
}

// readOnlyMappingsOf returns the private mappings in maps (the text of
// /proc/self/maps) that are of the file with device dev and inode ino
// and that no one may write. A line that does not read as a mapping is
// skipped: its range is not known to be the file's.
func readOnlyMappingsOf(maps []byte, dev, ino uint64) []mapping {
	var found []mapping
	for line := range bytes.Lines(maps) {
		// start-end perms offset major:minor inode path
		f := bytes.Fields(line)
		if len(f) < 6 || len(f[1]) != 4 {
			continue
		}
		perms := f[1]
		if perms[1] != '-' || perms[3] != 'p' {
			continue // writable, or shared with other processes
		}
		if n, err := strconv.ParseUint(string(f[4]), 10, 64); err != nil || n != ino {
			continue
		}
		major, minor, ok := bytes.Cut(f[3], []byte{':'})
		if !ok || !sameHex(major, uint64(unix.Major(dev))) || !sameHex(minor, uint64(unix.Minor(dev))) {
			continue
		}
		lo, hi, ok := bytes.Cut(f[0], []byte{'-'})
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		end, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		found = append(found, mapping{uintptr(start), uintptr(end)})
	}
	return found
}

func sameHex(b []byte, want uint64) bool {
	n, err := strconv.ParseUint(string(b), 16, 64)
	return err == nil && n == want
}
