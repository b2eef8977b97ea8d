package upgrade_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/upgrade"
)

// deliver makes dir/name a version as the archive driver leaves one: the
// executable (a shell script with body), then the arrival marker with
// counter.
func deliver(t *testing.T, dir, name string, counter uint64, body string) string {
	t.Helper()
	vdir := filepath.Join(dir, name)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vdir, upgrade.Executable), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	mark(t, vdir, fmt.Sprintf("%s %d\n", time.Now().UTC().Format(time.RFC3339Nano), counter))
	return vdir
}

func mark(t *testing.T, vdir, marker string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(vdir, upgrade.ArrivedFile), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(vs []upgrade.Version) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}

func wantNames(t *testing.T, what string, got []upgrade.Version, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if !slices.Equal(names(got), want) {
		t.Errorf("%s: got %v, want %v", what, names(got), want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return string(b)
}
