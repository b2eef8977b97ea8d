package unit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/drivers"
)

// This file is what a failed job's error says of the unit: its last
// journal lines, which end up in the host's journal, the control plane's
// streams and an operator's terminal. So they are bounded, stripped of
// anything a terminal would act on, and redacted.

// The bounds of what an error carries of a unit's journal.
const (
	journalLines = 20
	journalBytes = 4096
)

// journalWait bounds the journal's reading: a job that failed for want of
// time leaves none on its context.
const journalWait = 10 * time.Second

// journal returns the unit's last journal lines, cleaned, introduced for
// an error; or, when there are none, a short phrase that says so.
func (d *Driver) journal(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), journalWait)
	defer cancel()
	// journald reads what a service wrote in its own time, after the
	// manager saw it exit; --sync returns once it has taken in all it was
	// sent before. Only root may ask; without it the lines may be late.
	if _, err := drivers.RunTool(ctx, nil, "journalctl", "--sync"); errors.Is(err, drivers.ErrToolMissing) {
		return "no journal lines: journalctl is not installed"
	}
	out, err := drivers.RunTool(ctx, nil, "journalctl", "-u", name, "-n", fmt.Sprint(journalLines), "-o", "short-iso", "--no-pager")
	switch {
	case errors.Is(err, drivers.ErrToolMissing):
		return "no journal lines: journalctl is not installed"
	case err != nil:
		return "no journal lines: journalctl did not finish"
	}
	lines := cleanJournal(out.Stdout, d.redact)
	if lines == "" {
		if out.Code != 0 {
			return "no journal lines: journalctl failed (" + out.Status + ")"
		}
		return "no journal lines for " + name
	}
	return "its journal:\n" + lines
}

// cleanJournal makes journalctl's output fit for an error: its last
// journalLines lines, each as drivers.Shown shows it (the secrets redact
// knows and obvious credentials redacted, nothing a terminal would act
// on), and the whole cut to its last journalBytes bytes.
func cleanJournal(out string, redact func(string) string) string {
	var lines []string
	for line := range strings.Lines(out) {
		line = strings.TrimSuffix(line, "\n")
		if line == "" || line == "-- No entries --" {
			continue
		}
		lines = append(lines, line)
	}
	if len(lines) > journalLines {
		lines = lines[len(lines)-journalLines:]
	}
	for i, line := range lines {
		lines[i] = drivers.Shown(line, redact)
	}
	// Cut after redacting, so that no cut leaves a secret's tail behind
	// the pattern that would have found it.
	text := strings.Join(lines, "\n")
	if len(text) <= journalBytes {
		return text
	}
	text = text[len(text)-journalBytes:]
	if i := strings.IndexByte(text, '\n'); i >= 0 {
		return text[i+1:]
	}
	for !utf8.RuneStart(text[0]) {
		text = text[1:]
	}
	return "..." + text
}
