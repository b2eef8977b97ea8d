package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// comparison is the stored projection compared with a replay.
type comparison struct {
	stored        projector.State
	head, records uint64   // the projection's head; records replayed
	diff          []string // empty when they agree
}

// compareProjection replays the journal's records through the head of its
// stored projection and compares the two: what `replay --verify` prints and
// the scrub journals. Reading the projection first and replaying only
// through its head keeps records appended meanwhile (by a running service)
// out of the comparison.
func compareProjection(j *journal.Journal) (comparison, error) {
	var c comparison
	var err error
	if c.stored, c.head, err = storedState(j); err != nil {
		return c, fmt.Errorf("stored projection of %s: %w", j.Path(), err)
	}
	replayed := projector.State{}
	if c.head > 0 {
		if replayed, c.records, err = replayFrom(j, c.head, time.Time{}); err != nil {
			return c, fmt.Errorf("replay %s: %w", j.Path(), asDamage(j, err))
		}
	}
	c.diff = projector.Diff(replayed, c.stored)
	return c, nil
}

// scrub reads the whole journal as verifyJournal does (every record's
// checksum, the projection's and the snapshot's) and compares the stored
// projection with a replay of the records. Damage is returned as an error
// (and noted by j, so nothing is appended after it). A disagreement
// without damage is a finding, not an error: a host rolled back across a
// change to the fold disagrees with what the newer version stored, and
// must keep running; the next declaration's records correct it.
func scrub(j *journal.Journal) (event.JournalScrubbedPayload, []string, error) {
	var p event.JournalScrubbedPayload
	if err := verifyJournal(j); err != nil {
		return p, nil, err
	}
	c, err := compareProjection(j)
	if err != nil {
		return p, nil, err
	}
	info, err := j.Info()
	if err != nil {
		return p, nil, asDamage(j, err)
	}
	p = event.JournalScrubbedPayload{Head: c.head, First: info.First, Records: c.records, Owned: len(c.stored.Owned), Differences: len(c.diff)}
	return p, c.diff, nil
}

// scrubLoop scrubs the journal every interval and journals what each scrub
// found (journal.scrubbed). Damage ends the loop with it, which stops the
// service; a damaged journal is not appended to, so it is only logged.
// maintenance keeps a compaction, which drops records, from running under
// a scrub reading them.
func scrubLoop(ctx context.Context, j *journal.Journal, every time.Duration, maintenance *sync.Mutex, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		maintenance.Lock()
		start := time.Now()
		found, diff, err := scrub(j)
		maintenance.Unlock()
		switch {
		case errors.Is(err, journal.ErrClosed):
			return nil
		case err != nil:
			log.Error("journal scrub found damage; stopping", "err", err)
			return err
		}
		if len(diff) > 0 {
			log.Warn("journal scrub: the stored projection disagrees with a replay of the records (replayed != stored)",
				"head", found.Head, "differences", strings.Join(diff, "; "))
		}
		if _, err := j.Append(event.New(event.JournalScrubbed, 0, "", found)); errors.Is(err, journal.ErrClosed) {
			return nil
		} else if err != nil {
			return fmt.Errorf("journal the scrub: %w", err)
		}
		log.Info("journal scrubbed", "head", found.Head, "records", found.Records, "owned", found.Owned, "differences", found.Differences, "took", time.Since(start).Round(time.Millisecond))
	}
}
