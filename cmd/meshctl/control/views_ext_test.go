package control_test

import (
	"context"
	"io"

	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/control"
)

func init() {
	control.SetViews(fleetview.PrintNodes,
		func(ctx context.Context, w io.Writer, c *control.Client, node string, from uint64, asJSON bool) error {
			return fleetview.PrintJournal(ctx, w, c, node, from, asJSON)
		},
		func(ctx context.Context, w io.Writer, c *control.Client, node, resource string, asJSON bool) error {
			return fleetview.PrintWhy(ctx, w, c, node, resource, asJSON)
		},
		func(results []control.PlanResult) [][]string {
			var out [][]string
			for _, g := range fleetview.GroupPlans(results) {
				out = append(out, g.Nodes)
			}
			return out
		})
}
