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
	// synced is each tool's `sync -f` after each apply, for the tools
	// whose applies are not durable when they exit (not mesh-host).
	synced map[string][]time.Duration
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

// checkedRun prepares t's root, runs the tool, and checks the files. A
// preparation that fails or files left wrong are errWrong (the comparison
// stops); the tool's own failure is its cell's.
func checkedRun(t contender, n int, prepare func() error, run func() (sample, error)) (sample, error) {
	if err := prepare(); err != nil {
		return sample{}, errWrong{err}
	}
	s, err := run()
	if err != nil {
		return s, err
	}
	if err := verify(t.root(), n); err != nil {
		return s, errWrong{err}
	}
	return s, nil
}

// applyRun is a first apply into an empty root, then the files checked.
func applyRun(t contender, n int) (sample, error) {
	return checkedRun(t, n, t.reset, t.apply)
}

// noopRun is a run over a root that already matches: the files checked,
// and none of them rewritten.
func noopRun(t contender, n int) (sample, error) {
	var before map[string]identity
	s, err := checkedRun(t, n, func() (err error) {
		before, err = snapshot(t.root())
		return err
	}, t.noop)
	if err != nil {
		return s, err
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

// repairRun changes some files of a root that matches by hand (spoil),
// then runs the tool over it: the files checked.
func repairRun(t contender, n int) (sample, error) {
	return checkedRun(t, n, func() error { return spoil(t.root(), n) }, t.repair)
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

// others are the tools measured against mesh-host, in the table's order.
var others = []string{"CFEngine", "Puppet"}

// printTable prints a column for mesh-host and one for each other tool:
// its median, its ratio to mesh-host's, and for an apply the same with
// the `sync -f` that makes it as durable as mesh-host's; then every
// tool's peak resident set.
func printTable(w io.Writer, rows []row, g growth) {
	fmt.Fprintf(w, "| | mesh-host | %s | peak RSS |\n", strings.Join(others, " | "))
	fmt.Fprintf(w, "|---|---|%s---|\n", strings.Repeat("---|", len(others)))
	for _, r := range rows {
		mh := r.cell("mesh-host")
		cells := []string{r.label, timeCell(mh)}
		rss := []string{"mesh-host " + rssCell(mh)}
		for _, name := range others {
			o := r.cell(name)
			cells = append(cells, otherCell(o, mh, r.synced[name]))
			rss = append(rss, name+" "+rssCell(o))
		}
		cells = append(cells, strings.Join(rss, ", "))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintf(w, "| journal growth per `apply` of an unchanged 1,000-file declaration (over %d) | %s file, %s in use in bbolt pages |%s |\n",
		g.applies, byteCount(g.file), byteCount(g.inUse), strings.Repeat(" — |", len(others)))
}

// otherCell is another tool's time and its ratio to mesh-host's; with
// synced (an apply's `sync -f`s), the same made durable.
func otherCell(o, mh *result, synced []time.Duration) string {
	cell := timeCell(o)
	if o == nil || o.failure != "" {
		return cell
	}
	cell += ", " + ratio(o, mh, 0)
	if len(synced) > 0 {
		extra := medianOf(synced)
		cell += fmt.Sprintf("; with `sync -f` %s, %s", seconds(o.median()+extra), ratio(o, mh, extra))
	}
	return cell
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
		return "not measured: missing here"
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

// ratio is another tool's median (plus extra, its sync) over mesh-host's.
func ratio(o, mh *result, extra time.Duration) string {
	if o == nil || mh == nil || o.failure != "" || mh.failure != "" {
		return "—"
	}
	return fmt.Sprintf("%.1f×", float64(o.median()+extra)/float64(mh.median()))
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f s", d.Seconds()) }

func byteCount(n int64) string {
	if n < 10<<10 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
}
