package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/projector"
)

type statusCmd struct {
	JSON  bool `name:"json" help:"Print the projection as JSON."`
	Owned bool `name:"owned" help:"List every owned resource, not only the drifted and failed ones."`
}

func (c *statusCmd) Run(e *env) error {
	return e.withJournal(func(j *journal.Journal) error {
		s, _, err := storedState(j)
		if err != nil {
			return failed("stored projection of %s: %v", j.Path(), err)
		}
		info, err := j.Info()
		if err != nil {
			return failed("%v", err)
		}
		return printState(e, c.JSON, c.Owned, s, &info)
	})
}

// printState prints a State for a person (the drifted and failed resources,
// or with allOwned every owned one), or as JSON with the journal's info
// beside it.
func printState(e *env, asJSON, allOwned bool, s projector.State, info *journal.Info) error {
	if asJSON {
		out := struct {
			Journal *journal.Info   `json:"journal,omitempty"`
			State   projector.State `json:"state"`
		}{info, s}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	w := bufio.NewWriter(e.stdout)
	defer w.Flush()
	line := func(k, format string, a ...any) { fmt.Fprintf(w, "%-15s "+format+"\n", append([]any{k}, a...)...) }
	if info != nil {
		line("journal", "%s: head #%d, first #%d, %s", info.Path, info.Head, info.First, bytesHuman(info.Size))
	} else {
		line("head", "#%d", s.Head)
	}
	if r := s.Running; r != nil {
		build := ""
		if r.Build != "" {
			build = " (build " + r.Build + ")"
		}
		line("running", "version %s%s, pid %d, since %s (#%d)", r.Version, build, r.PID, r.Since.Format(journalview.TimeLayout), r.Seq)
	} else {
		line("running", "no host start recorded")
	}
	line("known-good", "%s", orNone(s.KnownGood))
	line("versions", "%s", orNone(strings.Join(s.Versions, ", ")))
	if d := s.Desired; d != nil {
		line("desired", "revision %d (%s), %d resources, declared at #%d", d.Revision, d.Digest, len(d.Resources), d.Seq)
	} else {
		line("desired", "no declaration received")
	}
	if r := s.LastReconcile; r != nil {
		quiet := ""
		if r.Quiet {
			quiet = ", quiet"
		}
		line("last reconcile", "#%d %s, revision %d: %s at %s; %d changed, %d unchanged, %d failed%s",
			r.Seq, r.Trigger, r.Revision, r.Result, r.Completed.Format(journalview.TimeLayout), r.Changed, r.Unchanged, r.Failed, quiet)
	} else {
		line("last reconcile", "none")
	}
	if p := s.Pending; p != nil {
		line("in progress", "#%d %s, revision %d, %d steps planned (no outcome yet: the next start finishes it)", p.Seq, p.Trigger, p.Revision, len(p.Plan))
	}
	var drifted, failedN int
	ids := make([]string, 0, len(s.Owned))
	for id, o := range s.Owned {
		if o.Drifted {
			drifted++
		}
		if o.Error != "" {
			failedN++
		}
		ids = append(ids, id)
	}
	slices.Sort(ids)
	line("owned", "%d resources, %d drifted, %d failed", len(s.Owned), drifted, failedN)
	if s.Link.Up {
		line("link", "up to %s since %s", s.Link.Broker, s.Link.Since.Format(journalview.TimeLayout))
	} else if !s.Link.Since.IsZero() {
		line("link", "down since %s: %s", s.Link.Since.Format(journalview.TimeLayout), orNone(s.Link.Reason))
	} else {
		line("link", "never up")
	}
	if s.Unknown+s.Undecodable > 0 {
		line("unread", "%d records of kinds this version does not know, %d it could not decode", s.Unknown, s.Undecodable)
	}
	for _, id := range ids {
		o := s.Owned[id]
		if !allOwned && !o.Drifted && o.Error == "" {
			continue
		}
		mark := ""
		if o.Drifted {
			mark = " DRIFTED"
		}
		if o.Error != "" {
			mark += " error: " + o.Error
		}
		fmt.Fprintf(w, "  %-40s %-9s #%d%s\n", id, o.LastOutcome, o.Seq, mark)
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func bytesHuman(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
