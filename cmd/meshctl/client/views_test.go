package client

import (
	"context"
	"io"
	"time"
)

// The printers are package fleetview's, which imports this package, so
// the tests here that print what the client read reach them through
// these; views_ext_test.go (package client_test, which may import
// fleetview) sets them before any test runs.
var (
	printNodes   func(w io.Writer, nodes []NodeStatus, now time.Time, asJSON bool) error
	printJournal func(ctx context.Context, w io.Writer, c *Client, node string, from uint64, asJSON bool) error
	printWhy     func(ctx context.Context, w io.Writer, c *Client, node, resource string, asJSON bool) error
	// planGroups is the nodes of each group of the same plan, as
	// PrintPlans groups them.
	planGroups func(results []PlanResult) [][]string
)
