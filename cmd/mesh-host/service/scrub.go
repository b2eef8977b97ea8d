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
