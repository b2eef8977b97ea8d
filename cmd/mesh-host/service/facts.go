package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// recordFacts journals the machine's facts (host.facts) when they differ
// from the last ones journaled: so the journal says when the machine
// changed under the mesh. It reports whether it appended.
func recordFacts(j *journal.Journal, gather func() event.HostFactsPayload) (bool, error) {
	s, _, err := hostjournal.StoredState(j)
	if err != nil {
		return false, err
	}
	now := gather()
	if len(now.Addresses) == 0 {
		now.Addresses = nil // as the projection keeps them
	}
	if s.Facts != nil && reflect.DeepEqual(*s.Facts, now) {
		return false, nil
	}
	if _, err := j.Append(event.New(event.HostFacts, 0, "", now)); err != nil {
		return false, fmt.Errorf("journal the machine's facts: %w", err)
	}
	return true, nil
}

// factsLoop looks at the machine's facts every interval and journals them
// when they changed; the next heartbeat's report carries them upward.
func factsLoop(ctx context.Context, j *journal.Journal, every time.Duration, gather func() event.HostFactsPayload, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		changed, err := recordFacts(j, gather)
		switch {
		case errors.Is(err, journal.ErrClosed):
			return nil
		case err != nil:
			log.Warn("the machine's facts", "err", err) // damage stops the service by its own path
		case changed:
			log.Info("the machine changed: its facts journaled")
		}
	}
}
