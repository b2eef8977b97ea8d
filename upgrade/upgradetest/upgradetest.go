// Package upgradetest lays out a versions directory for tests, as the
// archive driver and the package's install step leave one.
package upgradetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/upgrade"
)

// PlaceVersion makes dir/name a version as the archive driver leaves one:
// an executable mesh-host (a copy of exe, or a stub when exe is ""), then
// the arrival marker with counter. It returns the version's directory.
func PlaceVersion(t testing.TB, dir, name string, counter uint64, exe string) string {
	t.Helper()
	vdir := filepath.Join(dir, name)
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := []byte("#!/bin/sh\nexit 0\n")
	if exe != "" {
		var err error
		if body, err = os.ReadFile(exe); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(vdir, upgrade.Executable), body, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := fmt.Sprintf("%s %d\n", time.Now().UTC().Format(time.RFC3339Nano), counter)
	if err := os.WriteFile(filepath.Join(vdir, upgrade.ArrivedFile), []byte(marker), 0o644); err != nil {
		t.Fatal(err)
	}
	return vdir
}

// VersionNames lists the versions in dir, as upgrade.List orders them.
func VersionNames(t testing.TB, dir string) []string {
	t.Helper()
	vs, err := upgrade.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, v := range vs {
		out = append(out, v.Name)
	}
	return out
}
