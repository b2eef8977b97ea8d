package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// sample is one whole-process run: start to exit, and the child's peak
// resident set.
type sample struct {
	elapsed time.Duration
	maxRSS  int64 // bytes
}

// syncAll flushes every filesystem, so that no run pays for the writeback
// of the one before it.
func syncAll() error {
	if out, err := exec.Command("sync").CombinedOutput(); err != nil {
		return fmt.Errorf("sync: %v: %s", err, out)
	}
	return nil
}

// timed runs name with args after a sync, and returns its sample and its
// output. A non-zero exit is an error that carries the output's last
// lines, which a row shows as the tool's failure.
func timed(name string, args ...string) (sample, string, error) {
	if err := syncAll(); err != nil {
		return sample{}, "", err
	}
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start)
	if err != nil {
		return sample{}, out.String(), fmt.Errorf("%s: %v: %s", filepath.Base(name), err, lastLines(out.String(), 3))
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	// Linux reports ru_maxrss in KiB.
	return sample{elapsed: elapsed, maxRSS: ru.Maxrss << 10}, out.String(), nil
}

// lastLines is the end of a command's output, on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
