package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

type replayCmd struct {
	Until  string `name:"until" placeholder:"SEQ|TIME" help:"Stop at this sequence number or RFC 3339 time, and show the state there."`
	Verify bool   `name:"verify" help:"Compare the replayed state with the stored projection; exit 1 and print the difference when they disagree."`
	JSON   bool   `name:"json" help:"Print the state as JSON."`
}

// replayFrom folds the journal from its start (the compaction snapshot, when
// early records were compacted away) through untilSeq and untilTime (zero
// means no limit).
func replayFrom(j *journal.Journal, untilSeq uint64, untilTime time.Time) (projector.State, uint64, error) {
	s, snapSeq, err := snapshotState(j)
	if err != nil {
		return projector.State{}, 0, fmt.Errorf("compaction snapshot: %w", err)
	}
	if untilSeq != 0 && untilSeq < snapSeq {
		return projector.State{}, 0, fmt.Errorf("records up to #%d were compacted away: the earliest state the journal can show is at #%d", snapSeq, snapSeq)
	}
	var n uint64
	errUntil := errors.New("until")
	err = j.ScanBatches(snapSeq+1, untilSeq, func(batch []event.Record) error {
		if !untilTime.IsZero() {
			if i := slices.IndexFunc(batch, func(r event.Record) bool { return r.Time.After(untilTime) }); i >= 0 {
				s = projector.Replay(s, batch[:i])
				n += uint64(i)
				return errUntil
			}
		}
		s = projector.Replay(s, batch)
		n += uint64(len(batch))
		return nil
	})
	if err != nil && err != errUntil {
		return s, n, err
	}
	return s, n, nil
}

func (c *replayCmd) Run(e *env) error {
	var untilSeq uint64
	var untilTime time.Time
	if c.Until != "" {
		if c.Verify {
			return refused("--verify compares the whole journal; it takes no --until")
		}
		if n, err := strconv.ParseUint(c.Until, 10, 64); err == nil && n > 0 {
			untilSeq = n
		} else if t, err := time.Parse(time.RFC3339, c.Until); err == nil {
			untilTime = t
		} else {
			return refused("--until: %q is not a sequence number or an RFC 3339 time", c.Until)
		}
	}
	return e.withJournal(func(j *journal.Journal) error {
		if !c.Verify {
			s, _, err := replayFrom(j, untilSeq, untilTime)
			if err != nil {
				return failed("replay %s: %v", j.Path(), err)
			}
			return printState(e, c.JSON, false, s, nil)
		}
		cmp, err := compareProjection(j)
		if err != nil {
			return failed("%v", err)
		}
		n, head, diff := cmp.records, cmp.head, cmp.diff
		if len(diff) > 0 {
			fmt.Fprintf(e.stdout, "replay of %d records disagrees with the stored projection at head #%d (replayed != stored):\n", n, head)
			for _, d := range diff {
				fmt.Fprintf(e.stdout, "  %s\n", d)
			}
			return silent(exitFailed)
		}
		if c.JSON {
			return json.NewEncoder(e.stdout).Encode(map[string]any{"verified": true, "records": n, "head": head})
		}
		fmt.Fprintf(e.stdout, "replay of %d records matches the stored projection at head #%d\n", n, head)
		return nil
	})
}
