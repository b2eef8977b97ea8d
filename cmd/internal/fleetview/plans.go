package fleetview

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// PlanGroup is the nodes that answered with the same plan.
type PlanGroup struct {
	Nodes     []string             `json:"nodes"`
	Steps     []linkproto.PlanStep `json:"steps,omitempty"`
	Unchanged int                  `json:"unchanged"`
	Omitted   int                  `json:"omitted,omitempty"`
}

// GroupPlans groups the planned results by plan (their steps, each with
// the digest of what it would make the resource and its content diff, and
// the unchanged and omitted counts; not the revision, which differs from
// node to node), most nodes first, then by first node name. Each group's
// nodes are sorted. Two nodes whose rendered contents differ are never
// one group: their steps' digests differ.
func GroupPlans(results []client.PlanResult) []PlanGroup {
	byKey := map[string]*PlanGroup{}
	for _, r := range results {
		if r.Status != client.PlanPlanned || r.Answer == nil {
			continue
		}
		g := PlanGroup{Steps: r.Answer.Steps, Unchanged: r.Answer.Unchanged, Omitted: r.Answer.Omitted}
		key, _ := json.Marshal(g)
		if slices.ContainsFunc(g.Steps, undigested) {
			// A node older than digests in answers: what its steps
			// would write is unknown, so its plan is its own.
			key = append(key, r.Node...)
		}
		if have, ok := byKey[string(key)]; ok {
			have.Nodes = append(have.Nodes, r.Node)
			continue
		}
		g.Nodes = []string{r.Node}
		byKey[string(key)] = &g
	}
	out := make([]PlanGroup, 0, len(byKey))
	for _, g := range byKey {
		slices.Sort(g.Nodes)
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b PlanGroup) int {
		if len(a.Nodes) != len(b.Nodes) {
			return len(b.Nodes) - len(a.Nodes)
		}
		return strings.Compare(a.Nodes[0], b.Nodes[0])
	})
	return out
}

// undigested reports a step that applies a spec and does not say which.
func undigested(s linkproto.PlanStep) bool {
	return (s.Action == event.ActionCreate || s.Action == event.ActionUpdate) && s.Digest == ""
}

// maxNamed is how many nodes a group names before it counts the rest.
const maxNamed = 10

// nodeList names nodes, the first maxNamed of them and how many more.
func nodeList(nodes []string) string {
	if len(nodes) <= maxNamed {
		return strings.Join(nodes, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(nodes[:maxNamed], ", "), len(nodes)-maxNamed)
}

// PrintPlans prints a fleet's plan: the nodes with the same plan once,
// with their count and names (the most common plan first), then the nodes
// offline, refused, busy and failed, then a line of counts. asJSON prints
// JSON lines instead, one client.PlanResult each. It returns
// ErrFailureForeseen when a node's plan foresees a failure, and
// ErrNotPlanned when any node did not answer with a plan: a rollout should
// follow only a plan that returned nil.
func PrintPlans(w io.Writer, results []client.PlanResult, asJSON bool) error {
	var err error
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
	} else {
		err = printPlanText(w, results)
	}
	if err != nil {
		return err
	}
	var errs []error
	if failing := foreseeing(results); len(failing) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s", ErrFailureForeseen, nodeList(failing)))
	}
	if n := len(results) - count(results, client.PlanPlanned); n > 0 {
		errs = append(errs, fmt.Errorf("%w: %d of %d nodes did not answer with a plan", ErrNotPlanned, n, len(results)))
	}
	return errors.Join(errs...)
}

// foreseeing names the nodes that planned and foresee a failure.
func foreseeing(results []client.PlanResult) []string {
	var out []string
	for _, r := range results {
		if r.Status == client.PlanPlanned && !r.Clean() {
			out = append(out, r.Node)
		}
	}
	return out
}

func printPlanText(w io.Writer, results []client.PlanResult) error {
	groups := GroupPlans(results)
	for _, g := range groups {
		what := "no changes"
		if len(g.Steps) > 0 {
			what = fmt.Sprintf("%d to change", len(g.Steps)+g.Omitted)
		}
		failing := 0
		for _, s := range g.Steps {
			if s.Error != "" {
				failing++
			}
		}
		what = fmt.Sprintf("%s, %d unchanged", what, g.Unchanged)
		if failing > 0 {
			what += fmt.Sprintf(", %d foreseen to fail", failing)
		}
		fmt.Fprintf(w, "%s: %s\n  %s\n", Plural(len(g.Nodes), "node"), what, nodeList(g.Nodes))
		for _, s := range g.Steps {
			var detail []string
			if len(s.Differs) > 0 {
				detail = append(detail, "differs: "+strings.Join(s.Differs, ", "))
			}
			if s.Drift {
				detail = append(detail, "drift: changed outside the mesh")
			}
			if s.Error != "" {
				detail = append(detail, s.Error)
			}
			if s.Note != "" {
				detail = append(detail, s.Note)
			}
			fmt.Fprintln(w, strings.TrimRight(drivers.Printable(fmt.Sprintf("    %-10s  %-44s  %s", s.Action, s.ID, oneLine(strings.Join(detail, "; ")))), " "))
		}
		for _, s := range g.Steps {
			if s.Diff != "" {
				printDiff(w, s.Diff)
			}
		}
		if g.Omitted > 0 {
			fmt.Fprintf(w, "    … and %d more steps the answer could not hold (mesh-host plan on a node shows them all)\n", g.Omitted)
		}
	}
	for _, status := range []string{client.PlanOffline, client.PlanRefused, client.PlanBusy, client.PlanFailed} {
		n := count(results, status)
		if n == 0 {
			continue
		}
		fmt.Fprintf(w, "%s (%d):\n", status, n)
		for _, r := range results {
			if r.Status == status {
				fmt.Fprintf(w, "  %s: %s\n", r.Node, drivers.Printable(oneLine(r.Reason)))
			}
		}
	}
	failing := foreseeing(results)
	clean := 0
	for _, g := range groups {
		if slices.ContainsFunc(g.Steps, func(s linkproto.PlanStep) bool { return s.Error != "" }) {
			continue
		}
		clean++
	}
	parts := []string{fmt.Sprintf("%d planned (%s)", count(results, client.PlanPlanned)-len(failing), Plural(clean, "plan"))}
	if len(failing) == 1 {
		parts = append(parts, "1 foresees failures: "+nodeList(failing))
	} else if len(failing) > 1 {
		parts = append(parts, fmt.Sprintf("%d foresee failures: %s", len(failing), nodeList(failing)))
	}
	for _, status := range []string{client.PlanOffline, client.PlanRefused, client.PlanBusy, client.PlanFailed} {
		if n := count(results, status); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, status))
		}
	}
	_, err := fmt.Fprintf(w, "%s: %s\n", Plural(len(results), "node"), strings.Join(parts, ", "))
	return err
}

func count(results []client.PlanResult, status string) int {
	n := 0
	for _, r := range results {
		if r.Status == status {
			n++
		}
	}
	return n
}

// Plural is n and what, with an s after it unless n is 1: "1 node",
// "2 nodes".
func Plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// printDiff prints a step's content diff, as the node sent it (bounded by
// linkproto.MaxPlanDiffSize), escaped for the terminal and indented under
// its plan.
func printDiff(w io.Writer, diff string) {
	fmt.Fprintln(w)
	for _, line := range strings.SplitAfter(strings.TrimSuffix(drivers.Printable(diff), "\n"), "\n") {
		fmt.Fprintf(w, "    %s", strings.TrimSuffix(line, "\n")+"\n")
	}
}

// oneLine keeps a reason on its line: a refusal may list several.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
