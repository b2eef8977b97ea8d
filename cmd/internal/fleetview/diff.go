package fleetview

import (
	"fmt"
	"io"
	"strings"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

// PrintDiff writes each node's change as a unified diff of its resources,
// one line each, and a last line of counts.
func PrintDiff(w io.Writer, diffs []client.NodeDiff) error {
	changed, same, failed := 0, 0, 0
	for _, d := range diffs {
		switch {
		case d.Err != nil:
			failed++
			fmt.Fprintf(w, "%s: does not render: %v\n", d.Node, d.Err)
		case !d.Rendered.Changed:
			same++
		default:
			changed++
			r := d.Rendered
			var a []string
			from := d.Node + " (nothing stored)"
			if stored := r.Stored(); stored != nil {
				a = resourceLines(r.StoredAsDeclared())
				from = fmt.Sprintf("%s revision %d (stored)", d.Node, stored.Revision)
			}
			text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
				A: a, B: resourceLines(r.Declaration),
				FromFile: from,
				ToFile:   fmt.Sprintf("%s revision %d (from %s)", d.Node, r.Declaration.Revision, strings.Join(r.Profiles, ", ")),
				Context:  1,
			})
			if err != nil {
				return err
			}
			io.WriteString(w, text)
		}
	}
	fmt.Fprintf(w, "%s: %d to change, %d unchanged, %d do not render\n", Plural(len(diffs), "node"), changed, same, failed)
	return nil
}

// resourceLines is a declaration's resources, one JSON line each, so a
// diff shows whole resources.
func resourceLines(d *declaration.Declaration) []string {
	out := make([]string, len(d.Resources))
	for i, r := range d.Resources {
		one := declaration.Declaration{Resources: []drivers.Spec{r}}
		doc, _ := one.MarshalJSON()
		// {"mesh":"","node":"","revision":0,"resources":[X]} → X
		s := string(doc)
		s = s[strings.Index(s, `"resources":[`)+len(`"resources":[`) : len(s)-2]
		out[i] = s + "\n"
	}
	return out
}
