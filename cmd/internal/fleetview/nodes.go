package fleetview

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/labels"
)

// PrintNodes prints nodes as a table of every column (NodeColumns), or as
// JSON lines of client.NodeStatus when asJSON. Ages are measured from now.
func PrintNodes(w io.Writer, nodes []client.NodeStatus, now time.Time, asJSON bool) error {
	if asJSON { // JSON lines, one node each: for jq and for reading as they come
		return encodeLines(w, nodes)
	}
	return PrintNodeTable(w, nodes, now, NodeColumns())
}

// nodeColumn is a column of the nodes table: the name --columns calls it
// by, its heading, and its value for a node. Each column's value comes
// from its one function, whichever columns are shown.
type nodeColumn struct {
	name, heading string
	value         func(n client.NodeStatus, now time.Time) string
}

// nodeColumns are the nodes table's columns in their default order. STATE
// is last: its reason is free text, never cut, and may be long.
var nodeColumns = []nodeColumn{
	{"node", "NODE", func(n client.NodeStatus, _ time.Time) string { return n.Node }},
	{"version", "VERSION", func(n client.NodeStatus, _ time.Time) string {
		if hb := n.Heartbeat; hb != nil {
			return client.VersionLabel(hb.Build, hb.Version)
		}
		return "-"
	}},
	{"desired", "DESIRED", func(n client.NodeStatus, _ time.Time) string {
		if n.Desired != 0 {
			return fmt.Sprint(n.Desired)
		}
		return "-"
	}},
	{"applied", "APPLIED", func(n client.NodeStatus, _ time.Time) string {
		if hb := n.Heartbeat; hb != nil && hb.Local != nil { // what it holds is the local revision
			return fmt.Sprint(hb.Local.Revision)
		}
		if hb := n.Heartbeat; hb != nil {
			return fmt.Sprint(hb.Applied)
		}
		return "-"
	}},
	{"drifted", "DRIFTED", func(n client.NodeStatus, _ time.Time) string {
		if hb := n.Heartbeat; hb != nil {
			return fmt.Sprint(hb.Drifted)
		}
		return "-"
	}},
	{"failed", "FAILED", func(n client.NodeStatus, _ time.Time) string {
		if hb := n.Heartbeat; hb != nil {
			return fmt.Sprint(hb.Failed)
		}
		return "-"
	}},
	{"last-heard", "LAST HEARD", func(n client.NodeStatus, now time.Time) string {
		hb := n.Heartbeat
		switch {
		case hb == nil:
			return "-"
		case hb.Sent.IsZero():
			return "no time given"
		}
		return age(now.Sub(hb.Sent))
	}},
	{"credential", "CREDENTIAL", func(n client.NodeStatus, now time.Time) string {
		cr := n.Credential
		switch {
		case cr == nil:
			return "-"
		case !cr.Revoked.IsZero():
			return "revoked " + age(now.Sub(cr.Revoked))
		case !now.Before(cr.Expires):
			return "expired " + age(now.Sub(cr.Expires))
		}
		return "expires in " + span(cr.Expires.Sub(now))
	}},
	{"labels", "LABELS", func(n client.NodeStatus, _ time.Time) string { return labelsCell(n.Labels) }},
	{"state", "STATE", func(n client.NodeStatus, _ time.Time) string {
		state := n.State
		if n.Reason != "" {
			state += ": " + n.Reason
		}
		return state
	}},
}

// maxLabels bounds the LABELS cell: a node's labels are many short pairs,
// and a few of them say which node it is; --json has them all.
const maxLabels = 40

// labelsCell is labels as k=v,k=v, sorted by key: the pairs that fit in
// maxLabels (the first one always), then how many more there are. A pair
// is never cut: half a value would read as another value.
func labelsCell(set labels.Set) string {
	if len(set) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(set))
	var b strings.Builder
	for i, k := range keys {
		pair := k + "=" + set[k]
		if i > 0 && b.Len()+1+len(pair) > maxLabels {
			fmt.Fprintf(&b, ",+%d more", len(keys)-i)
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pair)
	}
	return b.String()
}

// NodeColumns are the names of the nodes table's columns, in their
// default order: what --columns chooses from.
func NodeColumns() []string {
	names := make([]string, len(nodeColumns))
	for i, c := range nodeColumns {
		names[i] = c.name
	}
	return names
}

// ParseNodeColumns reads a --columns list, "node,state,labels": the
// columns to show, in that order. An unknown name is refused with the
// names there are.
func ParseNodeColumns(list string) ([]string, error) {
	var out []string
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if !slices.ContainsFunc(nodeColumns, func(c nodeColumn) bool { return c.name == name }) {
			return nil, fmt.Errorf("unknown column %q: the columns are %s", name, strings.Join(NodeColumns(), ", "))
		}
		out = append(out, name)
	}
	return out, nil
}

// NodeCell is node n's value in the column called name (NodeColumns), as
// the table shows it: what the web view's table shows too, in the same
// words. An unknown column is "".
func NodeCell(name string, n client.NodeStatus, now time.Time) string {
	i := slices.IndexFunc(nodeColumns, func(c nodeColumn) bool { return c.name == name })
	if i < 0 {
		return ""
	}
	return nodeColumns[i].value(n, now)
}

// PrintNodeTable prints nodes as a table of columns (NodeColumns names),
// in that order, then the summary line when there is more than one node.
// Ages are measured from now.
func PrintNodeTable(w io.Writer, nodes []client.NodeStatus, now time.Time, columns []string) error {
	var cols []nodeColumn
	for _, name := range columns {
		i := slices.IndexFunc(nodeColumns, func(c nodeColumn) bool { return c.name == name })
		if i < 0 {
			return fmt.Errorf("unknown column %q", name)
		}
		cols = append(cols, nodeColumns[i])
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cells := make([]string, len(cols))
	for i, c := range cols {
		cells[i] = c.heading
	}
	fmt.Fprintln(tw, strings.Join(cells, "\t"))
	for _, n := range nodes {
		for i, c := range cols {
			cells[i] = c.value(n, now)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(nodes) > 1 {
		_, err := fmt.Fprintln(w, Summary(nodes))
		return err
	}
	return nil
}

// Count is how many nodes share a state, or a version.
type Count struct {
	Name string
	N    int
}

// Counts are the nodes by state and by version (a node never heard from
// is version "-"), each most first, then by name: the fleet's shape at a
// glance, as the table's summary and the web view show it.
func Counts(nodes []client.NodeStatus) (states, versions []Count) {
	st, vs := map[string]int{}, map[string]int{}
	for _, n := range nodes {
		st[n.State]++
		v := "-"
		if hb := n.Heartbeat; hb != nil {
			v = client.VersionLabel(hb.Build, hb.Version)
		}
		vs[v]++
	}
	return sortedCounts(st), sortedCounts(vs)
}

func sortedCounts(m map[string]int) []Count {
	out := make([]Count, 0, len(m))
	for k, n := range m {
		out = append(out, Count{k, n})
	}
	slices.SortFunc(out, func(a, b Count) int {
		return cmp.Or(cmp.Compare(b.N, a.N), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// Summary is one line of counts: nodes by state, then by version.
func Summary(nodes []client.NodeStatus) string {
	states, versions := Counts(nodes)
	line := func(cs []Count) string {
		parts := make([]string, len(cs))
		for i, c := range cs {
			parts[i] = fmt.Sprintf("%d %s", c.N, c.Name)
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%s: %s; versions: %s", Plural(len(nodes), "node"), line(states), line(versions))
}

// span shows a long duration in days, a short one to the second.
func span(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
	return d.Round(time.Second).String()
}

// age shows how long ago something was, to the second.
func age(d time.Duration) string {
	if d < 0 {
		// The node's clock is ahead of this one.
		return "just now"
	}
	return d.Round(time.Second).String() + " ago"
}

// linesAtOnce is how many values encodeLines gives one goroutine.
const linesAtOnce = 256

// encodeLines writes values as JSON lines, in order, encoding runs of them
// on goroutines of their own, one a CPU, with at most two runs a CPU
// waiting to be written. At 10,000 nodes, encoding one line after another
// was a fifth of `meshctl nodes --json`.
func encodeLines[V any](w io.Writer, values []V) error {
	type run struct {
		buf  bytes.Buffer
		err  error
		done chan struct{}
	}
	workers := runtime.GOMAXPROCS(0)
	runs := make(chan *run, 2*workers) // in order, for the writer
	go func() {
		defer close(runs)
		sem := make(chan struct{}, workers)
		for start := 0; start < len(values); start += linesAtOnce {
			r := &run{done: make(chan struct{})}
			runs <- r // blocks while the writer is that far behind
			sem <- struct{}{}
			go func(part []V) {
				defer func() { <-sem; close(r.done) }()
				enc := json.NewEncoder(&r.buf)
				for _, v := range part {
					if r.err = enc.Encode(v); r.err != nil {
						return
					}
				}
			}(values[start:min(start+linesAtOnce, len(values))])
		}
	}()
	var err error
	for r := range runs {
		<-r.done
		if err == nil {
			err = r.err
		}
		if err == nil {
			_, err = w.Write(r.buf.Bytes())
		}
	}
	return err
}
