package client_test

import (
	"context"
	"io"

	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
)

func init() {
	client.SetViews(fleetview.PrintNodes,
		func(ctx context.Context, w io.Writer, c *client.Client, node string, from uint64, asJSON bool) error {
			return fleetview.PrintJournal(ctx, w, c, node, from, asJSON)
		},
		func(ctx context.Context, w io.Writer, c *client.Client, node, resource string, asJSON bool) error {
			return fleetview.PrintWhy(ctx, w, c, node, resource, asJSON)
		},
		func(results []client.PlanResult) [][]string {
			var out [][]string
			for _, g := range fleetview.GroupPlans(results) {
				out = append(out, g.Nodes)
			}
			return out
		})
}
