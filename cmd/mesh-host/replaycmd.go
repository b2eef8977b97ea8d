package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
)

type replayCmd struct {
	Until  string `name:"until" placeholder:"SEQ|TIME" help:"Stop at this sequence number or RFC 3339 time, and show the state there."`
	Verify bool   `name:"verify" help:"Compare the replayed state with the stored projection; exit 1 and print the difference when they disagree."`
	JSON   bool   `name:"json" help:"Print the state as JSON."`
}

func (c *replayCmd) Run(e *env) error {
	var untilSeq uint64
	var untilTime time.Time
	if c.Until != "" {
		if c.Verify {
			return command.Refused("--verify compares the whole journal; it takes no --until")
		}
		if n, err := strconv.ParseUint(c.Until, 10, 64); err == nil && n > 0 {
			untilSeq = n
		} else if t, err := time.Parse(time.RFC3339, c.Until); err == nil {
			untilTime = t
		} else {
			return command.Refused("--until: %q is not a sequence number or an RFC 3339 time", c.Until)
		}
	}
	return e.withJournal(func(j *journal.Journal) error {
		if !c.Verify {
			s, _, err := hostjournal.Replay(j, untilSeq, untilTime)
			if err != nil {
				return failed("replay %s: %v", j.Path(), err)
			}
			return printState(e, c.JSON, false, s, nil)
		}
		cmp, err := hostjournal.Compare(j)
		if err != nil {
			return failed("%v", err)
		}
		n, head, diff := cmp.Records, cmp.Head, cmp.Diff
		if len(diff) > 0 {
			fmt.Fprintf(e.stdout, "replay of %d records disagrees with the stored projection at head #%d (replayed != stored):\n", n, head)
			for _, d := range diff {
				fmt.Fprintf(e.stdout, "  %s\n", d)
			}
			return command.Silent(command.ExitFailed)
		}
		if c.JSON {
			return json.NewEncoder(e.stdout).Encode(map[string]any{"verified": true, "records": n, "head": head})
		}
		fmt.Fprintf(e.stdout, "replay of %d records matches the stored projection at head #%d\n", n, head)
		return nil
	})
}
