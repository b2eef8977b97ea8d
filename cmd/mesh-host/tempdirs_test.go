package main

import (
	"os"
	"sync"
	"testing"
)

// tempDirs are directories that outlive any one test or benchmark (the
// binary built once, the million-record journal built once) and so cannot
// be a t.TempDir: TestMain removes them once every test has run. Left
// behind, a benchmark run leaves hundreds of megabytes in the temporary
// directory.
type tempDirs struct {
	mu   sync.Mutex
	dirs []string
}

var onceDirs tempDirs

// make makes a temporary directory that lives until the test binary ends.
func (d *tempDirs) make(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dirs = append(d.dirs, dir)
	return dir, nil
}

func (d *tempDirs) removeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dir := range d.dirs {
		os.RemoveAll(dir)
	}
	d.dirs = nil
}

// removingAfter runs the tests, then removes onceDirs: testscript.Main
// exits with the tests' code itself, so the removal goes inside Run.
type removingAfter struct{ m *testing.M }

func (r removingAfter) Run() int {
	defer onceDirs.removeAll()
	return r.m.Run()
}
