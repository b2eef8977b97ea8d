package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// row is one line of the table: each tool's runs, or why it failed.
type row struct {
	label   string
	tools   []string
	results []result
	synced  []time.Duration // CFEngine's `sync -f` after each apply, when measured
}

type result struct {
	samples []sample
	failure string
}

// notRun begins the cell of a tool left out of a row.
const notRun = "not run: "

// runner is one measured run of a tool, with the checks that make it count.
type runner func(t contender, n int) (sample, error)

// errWrong marks a run that wrote the wrong thing: the comparison stops.
type errWrong struct{ err error }

func (e errWrong) Error() string { return e.err.Error() }

// measure runs every tool runs times, interleaved (one run of each, then
// again). A tool that fails is not run again for the row, and its failure
// is the row's cell; a run that wrote the wrong thing stops everything.
// A tool that failed the row this one builds on (after, when not nil) is
// not run at all: it has nothing to check.
func measure(label string, tools []contender, n, runs int, run runner, after *row) (row, error) {
	r := row{label: label, results: make([]result, len(tools))}
	for i, t := range tools {
		r.tools = append(r.tools, t.name())
		if after != nil && after.results[i].failure != "" {
			r.results[i].failure = notRun + "its first apply failed"
		}
	}
	for range runs {
		for i, t := range tools {
			if r.results[i].failure != "" {
				continue
			}
			s, err := run(t, n)
			if wrong, ok := err.(errWrong); ok {
				return r, fmt.Errorf("%s: %s: %w", label, t.name(), wrong.err)
			}
			if err != nil {
				r.results[i].failure = err.Error()
				continue
			}
			r.results[i].samples = append(r.results[i].samples, s)
		}
	}
	return r, nil
}

// applyRun is a first apply into an empty root, then the files checked.
func applyRun(t contender, n int) (sample, error) {
	if err := t.reset(); err != nil {
		return sample{}, errWrong{err}
	}
	s, err := t.apply()
	if err != nil {
		return s, err
	}
	if err := verify(t.root(), n); err != nil {
		return s, errWrong{err}
	}
	return s, nil
}

// noopRun is a run over a root that already matches: the files checked,
// and none of them rewritten.
func noopRun(t contender, n int) (sample, error) {
	before, err := snapshot(t.root())
	if err != nil {
		return sample{}, errWrong{err}
	}
	s, err := t.noop()
	if err != nil {
		return s, err
	}
	if err := verify(t.root(), n); err != nil {
		return s, errWrong{err}
	}
	after, err := snapshot(t.root())
	if err == nil {
		err = unchanged(before, after)
	}
	if err != nil {
		return s, errWrong{err}
	}
	return s, nil
}

// median is the middle run's time (the lower of the two middle ones).
func (r result) median() time.Duration {
	d := make([]time.Duration, len(r.samples))
	for i, s := range r.samples {
		d[i] = s.elapsed
	}
	slices.Sort(d)
	return d[(len(d)-1)/2]
}

// peak is the largest resident set of any run.
func (r result) peak() int64 {
	var p int64
	for _, s := range r.samples {
		p = max(p, s.maxRSS)
	}
	return p
}

// growth is the journal's growth per apply of an unchanged declaration.
type growth struct {
	applies     int
	file, inUse int64
}

func printTable(w io.Writer, rows []row, g growth) {
	fmt.Fprintln(w, "| | CFEngine | CFEngine + `sync -f` | mesh-host | CFEngine / mesh-host | (+ sync) / mesh-host | peak RSS, CFEngine | peak RSS, mesh-host |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		cfe, mh := r.cell("CFEngine"), r.cell("mesh-host")
		// Only an apply has a sync to add: a no-op run wrote nothing.
		synced, syncedRatio := "—", "—"
		if len(r.synced) > 0 && cfe != nil && cfe.failure == "" {
			synced = seconds(cfe.median() + medianOf(r.synced))
			syncedRatio = ratio(cfe, mh, medianOf(r.synced))
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.label,
			timeCell(cfe), synced, timeCell(mh), ratio(cfe, mh, 0), syncedRatio,
			rssCell(cfe), rssCell(mh))
	}
	fmt.Fprintf(w, "| journal growth per `apply` of an unchanged 1,000-file declaration (over %d) | — | — | %s file, %s in use in bbolt pages | | | | |\n",
		g.applies, byteCount(g.file), byteCount(g.inUse))
}

func (r row) cell(tool string) *result {
	i := slices.Index(r.tools, tool)
	if i < 0 {
		return nil
	}
	return &r.results[i]
}

func medianOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

func timeCell(r *result) string {
	switch {
	case r == nil:
		return "missing"
	case strings.HasPrefix(r.failure, notRun):
		return r.failure
	case r.failure != "":
		return "fails: " + strings.ReplaceAll(r.failure, "|", `\|`)
	}
	return seconds(r.median())
}

func rssCell(r *result) string {
	if r == nil || r.failure != "" {
		return "—"
	}
	return fmt.Sprintf("%.0f MiB", float64(r.peak())/(1<<20))
}

// ratio is CFEngine's median (plus extra, its sync) over mesh-host's.
func ratio(cfe, mh *result, extra time.Duration) string {
	if cfe == nil || mh == nil || cfe.failure != "" || mh.failure != "" {
		return "—"
	}
	return fmt.Sprintf("%.1f×", float64(cfe.median()+extra)/float64(mh.median()))
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

func byteCount(n int64) string {
	if n < 10<<10 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
}
