package command

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
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
	Version    Version    `cmd:""`
	Completion Completion `cmd:""`
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
	if code, out := run("version"); code != ExitOK || out != "v9\n" {
		t.Errorf("version: %d %q", code, out)
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
