package command

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/mesh-host/mesh-host/upgrade"
	"github.com/mesh-host/mesh-host/upgrade/upgradetest"
)

func TestFinish(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		fallback int
		code     int
		printed  string
	}{
		{"no error", nil, 9, ExitOK, ""},
		{"a plain error takes the fallback", errors.New("boom"), 4, 4, "prog: boom\n"},
		{"a refusal, wrapped", fmt.Errorf("run: %w", Refused("no %s", "way")), 4, ExitRefused, "prog: no way\n"},
		{"silent says nothing", Silent(3), 1, 3, ""},
	} {
		var out bytes.Buffer
		if got := Finish(&out, "prog", tc.err, tc.fallback); got != tc.code || out.String() != tc.printed {
			t.Errorf("%s: got %d %q, want %d %q", tc.name, got, out.String(), tc.code, tc.printed)
		}
	}
	if Silent(ExitOK) != nil {
		t.Error("Silent(ExitOK) is an error")
	}
}

type grammar struct {
	ShowVersion VersionFlag `name:"version"`
	Version     Version     `cmd:""`
	Completion  Completion  `cmd:""`
}

// run parses and runs args as a main does, returning the exit code and
// what was written.
func run(args ...string) (code int, stdout string) {
	var out bytes.Buffer
	var g grammar
	defer func() { stdout = out.String() }() // after RecoverExit, deferred next
	defer RecoverExit(&code)
	p, err := NewParser(&g, "prog", "a test", &out, &out, kong.Vars{"version": "v9"})
	if err != nil {
		return Finish(&out, "prog", err, ExitRefused), out.String()
	}
	k, err := p.Parse(args)
	if err != nil {
		return Finish(&out, "prog", err, ExitRefused), out.String()
	}
	code = Finish(&out, "prog", k.Run(), ExitFailed)
	return code, out.String()
}

func TestParserAndCommands(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out := run(args...); code != ExitOK || !strings.HasPrefix(out, "v9\nexecutable sha256:") {
			t.Errorf("%s: %d %q; want the label, then the executable's digest", args[0], code, out)
		}
	}
	if code, out := run("--help"); code != ExitOK || !strings.Contains(out, "a test") {
		t.Errorf("--help: exit %d, %q; want 0 and the description (kong's exit recovered)", code, out)
	}
	if code, _ := run("no-such-command"); code != ExitRefused {
		t.Errorf("an unknown command: exit %d, want %d", code, ExitRefused)
	}
	if code, out := run("completion", "bash"); code != ExitOK || !strings.Contains(out, "prog") {
		t.Errorf("completion bash: exit %d, %q", code, out)
	}
}

// TestPrintVersionNamesTheDigests: --version says the label, the
// executable's digest, and the version directory it runs from, which is
// how status and nodes name a running version; a binary elsewhere has no
// version line, and one that cannot be read says why.
func TestPrintVersionNamesTheDigests(t *testing.T) {
	dir := t.TempDir()
	const name = "bc3fbe173569aa37e6ca4c39d5d6bfd4d7bb9d1e1d7d1f3f8f2b7ed1c0d3a4b5"
	vdir := upgradetest.PlaceVersion(t, dir, name, 1, "")
	exe := filepath.Join(vdir, upgrade.Executable)
	sum := sha256.Sum256([]byte("#!/bin/sh\nexit 0\n")) // PlaceVersion's stub
	digest := hex.EncodeToString(sum[:])

	var b strings.Builder
	if err := printVersion(&b, "next", exe, nil); err != nil {
		t.Fatal(err)
	}
	if want := "next\nexecutable sha256:" + digest + "\nversion " + name + "\n"; b.String() != want {
		t.Errorf("in a version directory:\n%s\nwant:\n%s", b.String(), want)
	}

	loose := filepath.Join(t.TempDir(), upgrade.Executable)
	if err := os.WriteFile(loose, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := printVersion(&b, "dev", loose, nil); err != nil {
		t.Fatal(err)
	}
	if want := "dev\nexecutable sha256:" + digest + "\n"; b.String() != want {
		t.Errorf("outside a versions directory:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := printVersion(&b, "dev", filepath.Join(t.TempDir(), "gone"), nil); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(b.String(), "dev\nexecutable: no digest (") {
		t.Errorf("an executable that cannot be read:\n%s", b.String())
	}
}
