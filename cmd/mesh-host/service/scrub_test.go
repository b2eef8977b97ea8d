package service

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// TestFirstScrub: the first scrub after a start is due an interval after
// the last one journaled (at once when that is past), or after the
// journal's first record when none was: a host restarted more often than
// the interval is scrubbed all the same.
func TestFirstScrub(t *testing.T) {
	const every = 24 * time.Hour
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got, err := firstScrub(j, every, t0); err != nil || got != every {
		t.Errorf("an empty journal: %v %v, want %v", got, err, every)
	}
	if _, err := j.Append(event.New(event.HostStarted, 0, "", map[string]string{})); err != nil {
		t.Fatal(err)
	}
	if got, err := firstScrub(j, every, t0.Add(5*time.Hour)); err != nil || got != 19*time.Hour {
		t.Errorf("5 h after the first record, none scrubbed: %v %v, want 19h", got, err)
	}
	if got, err := firstScrub(j, every, t0.Add(30*time.Hour)); err != nil || got != 0 {
		t.Errorf("30 h after the first record, none scrubbed: %v %v, want 0", got, err)
	}
	now = t0.Add(40 * time.Hour)
	if _, err := j.Append(event.New(event.JournalScrubbed, 0, "", event.JournalScrubbedPayload{})); err != nil {
		t.Fatal(err)
	}
	now = t0.Add(41 * time.Hour)
	if _, err := j.Append(event.New(event.HostStarted, 0, "", map[string]string{})); err != nil {
		t.Fatal(err)
	}
	if got, err := firstScrub(j, every, t0.Add(42*time.Hour)); err != nil || got != 22*time.Hour {
		t.Errorf("2 h after the last scrub: %v %v, want 22h", got, err)
	}
}
