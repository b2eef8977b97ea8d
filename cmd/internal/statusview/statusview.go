// Package statusview prints a host's projection for a person: what
// `mesh-host status` and `replay` show from the host's journal, and what
// `meshctl status NODE` shows from the projection the node reports. One
// renderer, so that the two never disagree about what a state means.
package statusview

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/projector"
)

// Options say what to print beside the state.
type Options struct {
	// Header lines come first, each a key and its text (the journal's
	// file, or when the node reported).
	Header [][2]string
	// AllOwned lists every owned resource, not only the drifted and
	// failed ones.
	AllOwned bool
	// Alive, when set, says whether a process id still runs: the running
	// host is marked "not running" when its pid is gone. Nil when that
	// cannot be known here (the state came from elsewhere, or the host
	// itself prints it).
	Alive func(pid int) bool
	// Link, when set, says what is known of the link beside what the
	// state records (recorded, as "up to … since …"), which its writer
	// could not know to be over: the host stopped or was killed, or its
	// node is not heard from. Its answer is the link line.
	Link func(recorded string) string
}

// Print writes s for a person.
func Print(out io.Writer, s projector.State, o Options) error {
	w := bufio.NewWriter(out)
	line := func(k, format string, a ...any) { fmt.Fprintf(w, "%-15s "+format+"\n", append([]any{k}, a...)...) }
	for _, h := range o.Header {
		line(h[0], "%s", h[1])
	}
	if r := s.Running; r != nil {
		build, gone := "", ""
		if r.Build != "" {
			build = " (build " + r.Build + ")"
		}
		if o.Alive != nil && r.PID > 0 && !o.Alive(r.PID) {
			gone = "; not running: no process has that pid"
		}
		line("running", "version %s%s, pid %d, since %s (#%d)%s", r.Version, build, r.PID, r.Since.Format(journalview.TimeLayout), r.Seq, gone)
	} else {
		line("running", "no host start recorded")
	}
	if f := s.Facts; f != nil {
		osName := strings.TrimSpace(f.OSID + " " + f.OSVersion)
		if osName == "" {
			osName = "OS unknown (no os-release under the root)"
		}
		line("machine", "%s: %s, %s, kernel %s, %d cores, %d MiB, boot %s, addresses %s", f.Hostname, osName, f.Arch, f.Kernel, f.Cores, f.MemoryMB, orNone(f.BootID), orNone(strings.Join(f.Addresses, " ")))
	}
	line("known-good", "%s", orNone(s.KnownGood))
	versions := make([]string, 0, len(s.Versions))
	for _, v := range s.Versions {
		if slices.Contains(s.Bad, v) {
			v += " (bad: rolled back from)"
		}
		versions = append(versions, v)
	}
	line("versions", "%s", orNone(strings.Join(versions, ", ")))
	if d := s.Desired; d != nil {
		line("desired", "revision %d (%s), %d resources, declared at #%d", d.Revision, d.Digest, len(d.Resources), d.Seq)
	} else {
		line("desired", "no declaration received")
	}
	if in, ok := inForce(s); ok {
		line("declaration", "%s", in)
	}
	if g := s.LastGood; g != nil {
		line("last good", "revision %d (%s), declared at #%d, converged at #%d, %s", g.Revision, g.Digest, g.Seq, g.Converged, g.At.Format(journalview.TimeLayout))
	} else {
		line("last good", "none: no declaration has converged")
	}
	if behind, why := behind(s); behind {
		line("behind", "%s", why)
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
	drifted, ownedFailed := 0, 0
	for _, ow := range s.Owned {
		if ow.Drifted {
			drifted++
		}
		if ow.Error != "" {
			ownedFailed++
		}
	}
	line("owned", "%d resources, %d drifted, %d failed", len(s.Owned), drifted, ownedFailed)
	if len(s.Failing) > 0 {
		line("failing", "%d declared %s never applied: the latest apply failed", len(s.Failing), plural(len(s.Failing), "resource", "resources"))
	}
	if len(s.Skipped) > 0 {
		line("skipped", "%d declared %s not applied: one %s on failed", len(s.Skipped), plural(len(s.Skipped), "resource", "resources"),
			plural(len(s.Skipped), "it depends", "they depend"))
	}
	for _, id := range slices.Sorted(maps.Keys(s.Refreshes)) {
		r := s.Refreshes[id]
		failed, rest := "", ""
		if r.Error != "" {
			first, more, _ := strings.Cut(r.Error, "\n")
			failed, rest = fmt.Sprintf("; last try failed (#%d): %s", r.FailedSeq, first), more
		}
		line("refresh owed", "%s %s since #%d, %s: %s%s", orNone(r.Refresh), id, r.Seq, r.Since.Format(journalview.TimeLayout), RefreshSources(r), failed)
		// The rest of the message (a failed unit's journal lines) under
		// it, indented: a message is never cut.
		for l := range strings.Lines(rest) {
			line("", "  %s", strings.TrimSuffix(l, "\n"))
		}
	}
	link := "never up"
	if s.Link.Up {
		link = fmt.Sprintf("up to %s since %s", s.Link.Broker, s.Link.Since.Format(journalview.TimeLayout))
	} else if !s.Link.Since.IsZero() {
		link = fmt.Sprintf("down since %s: %s", s.Link.Since.Format(journalview.TimeLayout), orNone(s.Link.Reason))
	}
	if o.Link != nil {
		link = o.Link(link)
	}
	line("link", "%s", link)
	if s.Unknown+s.Undecodable > 0 {
		line("unread", "%d records of kinds this version does not know, %d it could not decode", s.Unknown, s.Undecodable)
	}
	type row struct{ id, outcome, rest string }
	var rows []row
	for id, ow := range s.Owned {
		if !o.AllOwned && !ow.Drifted && ow.Error == "" {
			continue
		}
		rest := fmt.Sprintf("#%d", ow.Seq)
		if ow.Drifted {
			rest += " DRIFTED"
		}
		if ow.Error != "" {
			rest += " error: " + ow.Error
		}
		if ow.GoodRevision != 0 && (ow.Error != "" || o.AllOwned) {
			rest += fmt.Sprintf(" (last good spec %s, of revision %d)", short(ow.SpecDigest), ow.GoodRevision)
		}
		rows = append(rows, row{id, string(ow.LastOutcome), rest})
	}
	for id, f := range s.Failing {
		rows = append(rows, row{id, "failed", fmt.Sprintf("#%d never applied; error: %s", f.Seq, f.Error)})
	}
	for id, k := range s.Skipped {
		rows = append(rows, row{id, "skipped", fmt.Sprintf("#%d not applied: %s failed", k.Seq, k.Requirement)})
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.id, b.id) })
	for _, r := range rows {
		fmt.Fprintf(w, "  %-40s %-9s %s\n", r.id, r.outcome, r.rest)
	}
	return w.Flush()
}

// counts returns how many resources drifted and how many failed: owned
// resources whose last apply failed, and declared ones never applied.
func counts(s projector.State) (drifted, failed int) {
	for _, o := range s.Owned {
		if o.Drifted {
			drifted++
		}
		if o.Error != "" {
			failed++
		}
	}
	return drifted, failed + len(s.Failing)
}

// behind reports whether the host holds an older declaration than the one
// it was given (its latest did not converge), and says so: the last good
// revision, the desired one, and how many resources failed.
func behind(s projector.State) (bool, string) {
	d := s.Desired
	if d == nil {
		return false, ""
	}
	if g := s.LastGood; g != nil && g.Revision == d.Revision {
		return false, ""
	}
	last := "none"
	if g := s.LastGood; g != nil {
		last = fmt.Sprint(g.Revision)
	}
	_, failed := counts(s)
	why := fmt.Sprintf("last good %s, desired %d", last, d.Revision)
	switch {
	case s.Pending != nil:
		why += ": a reconcile is in progress"
	case failed > 0:
		why += fmt.Sprintf(": %d failed", failed)
	}
	return true, why
}

// RefreshSources says which changes owe a refresh, in one line: what
// both status commands and the web view show.
func RefreshSources(r projector.OwedRefresh) string {
	var names []string
	for _, src := range r.Sources {
		what := src.Resource + " " + string(src.Change)
		switch {
		case src.Repair:
			what += " (drift repaired)"
		case src.Interrupted != 0:
			what = fmt.Sprintf("%s (the reconcile at #%d stopped before saying whether it changed)", src.Resource, src.Interrupted)
		}
		names = append(names, what)
	}
	if r.More > 0 {
		names = append(names, fmt.Sprintf("%d more", r.More))
	}
	return strings.Join(names, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func short(digest string) string {
	if len(digest) > len("sha256:")+12 {
		return digest[:len("sha256:")+12]
	}
	return digest
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
