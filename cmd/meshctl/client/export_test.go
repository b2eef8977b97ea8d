package client

import (
	"context"
	"io"
	"time"
)

// SetViews gives the tests of this package the printers of package
// fleetview (see views_test.go).
func SetViews(
	nodes func(w io.Writer, nodes []NodeStatus, now time.Time, asJSON bool) error,
	journal func(ctx context.Context, w io.Writer, c *Client, node string, from uint64, asJSON bool) error,
	why func(ctx context.Context, w io.Writer, c *Client, node, resource string, asJSON bool) error,
	groups func(results []PlanResult) [][]string,
) {
	printNodes, printJournal, printWhy, planGroups = nodes, journal, why, groups
}
