package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// scrubLoop scrubs the journal every interval and journals what each scrub
// found (journal.scrubbed). Damage ends the loop with it, which stops the
// service; a damaged journal is not appended to, so it is only logged.
// maintenance keeps a compaction, which drops records, from running under
// a scrub reading them.
//
// The scrub is the service's only whole read of the file (its start reads
// what it needs, checked as read), so its pace outlasts a restart: the
// first is due every after the last journal.scrubbed, or after the
// journal's first record when none was journaled yet. A host restarted
// more often than every is scrubbed all the same.
func scrubLoop(ctx context.Context, j *journal.Journal, every time.Duration, maintenance *sync.Mutex, log *slog.Logger) error {
	wait, err := firstScrub(j, every, time.Now())
	if err != nil {
		return err
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			t.Reset(every)
		}
		maintenance.Lock()
		start := time.Now()
		found, diff, err := hostjournal.Scrub(j)
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

// firstScrub is how long after now the first scrub of this run is due:
// every after the last one journaled, or after the journal's first record
// (the start of its history, as far as it keeps it) when none was.
func firstScrub(j *journal.Journal, every time.Duration, now time.Time) (time.Duration, error) {
	last, ok, err := j.LatestOfKind(event.JournalScrubbed)
	if err != nil {
		return 0, hostjournal.AsDamage(j, err)
	}
	if !ok {
		info, err := j.Info()
		if err != nil {
			return 0, hostjournal.AsDamage(j, err)
		}
		if last, ok, err = j.Get(info.First); err != nil {
			return 0, hostjournal.AsDamage(j, err)
		}
	}
	if !ok {
		return every, nil
	}
	return max(0, every-now.Sub(last.Time)), nil
}
