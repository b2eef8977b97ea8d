package unit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	godbus "github.com/godbus/dbus/v5"

	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/unit"
)

// wantTerminalSafe fails the test if s holds anything a terminal acts on:
// a control character but newline and tab (C0, DEL, C1), or bytes that
// are not UTF-8.
func wantTerminalSafe(t *testing.T, what, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		t.Errorf("%s is not UTF-8: %q", what, s)
	}
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r >= 0x80 && r <= 0x9f {
			t.Errorf("%s holds control character %U: %q", what, r, s)
			return
		}
	}
}

func TestCleanJournal(t *testing.T) {
	redact := func(s string) string { return strings.ReplaceAll(s, "s3cr3t", "[secret]") }
	for _, tc := range []struct{ in, want string }{
		{"plain line\n", "plain line"},
		{"-- No entries --\n", ""},
		{"\x1b[1;31mred\x1b[0m and \x1b]0;title\x07done\n", "red and done"},
		{"carriage\rreturn, tab\there, bell\a, del\x7f\n", "carriage\\x0dreturn, tab\there, bell\\x07, del\\x7f"},
		{"c1 \u009b31m csi and \u0085 nel\n", `c1 \u009b31m csi and \u0085 nel`},
		{"not utf-8 \xff\xfe\n", `not utf-8 \xff\xfe`},
		{"bidi \u202egnp.exe\n", `bidi \u202egnp.exe`},
		{"lone \x1b( escape\n", `lone \x1b( escape`},
		{"boom-password=hunter2 exit 3\n", "boom-password=[redacted] exit 3"},
		{"token: abc123, next\n", "token: [redacted], next"},
		{`{"secret": "two words", "user": "ann"}` + "\n", `{"secret": [redacted], "user": "ann"}`},
		{"API_KEY=zzz PASSWD='x y'\n", "API_KEY=[redacted] PASSWD=[redacted]"},
		{"> Authorization: Bearer eyJhbGciOi.x.y\n", "> Authorization: [redacted]"},
		{"connecting with s3cr3t now\n", "connecting with [secret] now"},
		{"a secret split s3\x1b[0mcr3t\n", "a secret split [secret]"},
	} {
		got := unit.CleanJournal(tc.in, redact)
		if got != tc.want {
			t.Errorf("CleanJournal(%q):\n got %q\nwant %q", tc.in, got, tc.want)
		}
		wantTerminalSafe(t, fmt.Sprintf("CleanJournal(%q)", tc.in), got)
	}
}

// TestCleanJournalBounds: at most the last 20 lines and 4 KiB, cut at a
// line's start, or within a line that long at a character's.
func TestCleanJournalBounds(t *testing.T) {
	var lines []string
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("line %02d", i))
	}
	got := unit.CleanJournal(strings.Join(lines, "\n")+"\n", nil)
	if want := strings.Join(lines[10:], "\n"); got != want {
		t.Errorf("30 lines cleaned to:\n%s\nwant the last 20:\n%s", got, want)
	}

	long := strings.Repeat("é", 300) // 600 bytes a line
	lines = lines[:0]
	for i := range 20 {
		lines = append(lines, fmt.Sprintf("%02d %s", i, long))
	}
	got = unit.CleanJournal(strings.Join(lines, "\n"), nil)
	if len(got) > 4096 || !strings.HasPrefix(got, "14 ") || !strings.HasSuffix(got, lines[19]) {
		t.Errorf("20 lines of 600 bytes cleaned to %d bytes starting %.10q, want at most 4096 from a line's start to the last line", len(got), got)
	}

	got = unit.CleanJournal("x"+strings.Repeat("é", 5000), nil)
	if len(got) > 4096+len("...") || !strings.HasPrefix(got, "...é") || !utf8.ValidString(got) {
		t.Errorf("one line of 10,001 bytes cleaned to %d bytes starting %.10q, want its tail, whole characters, at most 4 KiB", len(got), got)
	}
}

// fakeJournalctl prints what $FAKE_JOURNAL holds for a query, logs its
// arguments, and answers --sync.
const fakeJournalctl = `#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_LOG"
[ "$1" = "--sync" ] && exit 0
/bin/cat "$FAKE_JOURNAL"
`

func TestJournalOf(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "journalctl"), []byte(fakeJournalctl), 0o755); err != nil {
		t.Fatal(err)
	}
	journal, log := filepath.Join(t.TempDir(), "journal"), filepath.Join(t.TempDir(), "log")
	t.Setenv("PATH", bin)
	t.Setenv("FAKE_JOURNAL", journal)
	t.Setenv("FAKE_LOG", log)
	d := unit.New(driverstest.OpenRoot(t, t.TempDir()), unit.Options{Redact: func(s string) string { return strings.ReplaceAll(s, "opensesame", "[secret]") }})

	lines := "2026-12-04T10:00:00+0000 vm sh[12]: boom-password=hunter2\n2026-12-04T10:00:00+0000 vm sh[12]: \x1b[31mthe door: opensesame\x1b[0m\r\n"
	if err := os.WriteFile(journal, []byte(lines), 0o644); err != nil {
		t.Fatal(err)
	}
	got := d.JournalOf(t.Context(), "mesh-fail.service")
	want := "its journal:\n2026-12-04T10:00:00+0000 vm sh[12]: boom-password=[redacted]\n2026-12-04T10:00:00+0000 vm sh[12]: the door: [secret]\\x0d"
	if got != want {
		t.Errorf("JournalOf:\n got %q\nwant %q", got, want)
	}
	if b, _ := os.ReadFile(log); string(b) != "--sync\n-u mesh-fail.service -n 20 -o short-iso --no-pager\n" {
		t.Errorf("journalctl ran with:\n%s", b)
	}

	if err := os.WriteFile(journal, []byte("-- No entries --\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := d.JournalOf(t.Context(), "mesh-fail.service"); got != "no journal lines for mesh-fail.service" {
		t.Errorf("JournalOf with no entries = %q", got)
	}
	t.Setenv("PATH", t.TempDir())
	if got := d.JournalOf(t.Context(), "mesh-fail.service"); got != "no journal lines: journalctl is not installed" {
		t.Errorf("JournalOf without journalctl = %q", got)
	}
}

// TestWatchLoop: a unit that leaves active, activating or reloading is told
// of once, with the others that stop with it, within a second; a unit
// already stopped, or never seen running, is not; the loop ends with its
// context, or its connection, saying which.
func TestWatchLoop(t *testing.T) {
	signals := make(chan *godbus.Signal, 16)
	told := make(chan string, 16)
	was := map[string]string{"a.service": "active", "b@x-1.service": "reloading", "c.service": "inactive", "e.service": "activating"}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- unit.WatchLoop(ctx, signals, was, func(name string) { told <- name }) }()

	next := func(want string, within time.Duration) {
		t.Helper()
		select {
		case got := <-told:
			if got != want {
				t.Errorf("told of %s, want %s", got, want)
			}
		case <-time.After(within):
			t.Fatalf("not told of %s within %v", want, within)
		}
	}
	start := time.Now()
	for _, s := range []*godbus.Signal{
		unit.StateSignal("a.service", "deactivating"),
		unit.StateSignal("a.service", "inactive"),
		unit.StateSignal("b@x-1.service", "failed"),
		unit.StateSignal("c.service", "inactive"),         // stopped already
		unit.StateSignal("d.service", "inactive"),         // loaded to be looked at
		{Name: "org.freedesktop.systemd1.Manager.JobNew"}, // not a unit's state
	} {
		signals <- s
	}
	next("a.service", time.Second)
	next("b@x-1.service", time.Second)
	if took := time.Since(start); took < unit.Coalesce/2 {
		t.Errorf("told of a burst after %v, want it gathered for about %v", took, unit.Coalesce)
	}
	signals <- unit.StateSignal("a.service", "activating")
	signals <- unit.StateSignal("a.service", "active")
	signals <- unit.StateSignal("a.service", "failed")
	signals <- unit.StateSignal("e.service", "inactive")
	next("a.service", time.Second)
	next("e.service", time.Second)
	select {
	case name := <-told:
		t.Errorf("told of %s again", name)
	default:
	}

	cancel()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("WatchLoop after its context ended = %v, want context.Canceled", err)
	}
	closed := make(chan *godbus.Signal)
	close(closed)
	if err := unit.WatchLoop(t.Context(), closed, nil, func(string) {}); !errors.Is(err, unit.ErrManager) {
		t.Errorf("WatchLoop on a closed connection = %v, want ErrManager", err)
	}
}
