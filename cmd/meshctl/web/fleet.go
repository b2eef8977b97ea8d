package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/fleetview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/labels"
)

// PageSize is how many nodes the fleet's table shows a page.
const PageSize = 100

// Bounds of the drift picture: the hours it covers, and the records it
// reads at most for them. A fleet that journals more than that in a day
// is drawn from its latest records, and the picture says so.
const (
	driftHours      = 24
	maxDriftRecords = 20_000
)

// maxVersionBars bounds the versions picture: the most common versions,
// then the rest as one bar.
const maxVersionBars = 8

// fleetData is the fleet page.
type fleetData struct {
	Select  string
	Problem string
	// Total is how many nodes the selector selects; Rows are this page's.
	Total        int
	Rows         []nodeRow
	States       []fleetview.Count
	Versions     []fleetview.Count
	Page         int
	Prev         string
	Next         string
	Pages        int
	VersionChart barChart
	Drift        driftChart
}

// nodeRow is one node of the table, each cell in the words `meshctl
// nodes` uses (fleetview.NodeCell).
type nodeRow struct {
	Node, State, Reason, Version, Desired, Applied, Drift, Failing, Heard string
	Labels                                                                string
}

// fleet is the fleet's table, filtered by the selector in ?select and cut
// into pages of PageSize (?page, from 1).
func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := fleetData{Select: q.Get("select"), Page: 1}
	sel, err := labels.Parse(d.Select)
	if err != nil {
		d.Problem = err.Error()
		s.pageStatus(w, r, http.StatusBadRequest, "fleet.html", "Fleet", d)
		return
	}
	if p, err := strconv.Atoi(q.Get("page")); err == nil && p > 1 {
		d.Page = p
	}
	nodes, err := s.cfg.Client.Nodes(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	nodes = client.Select(nodes, sel)
	now := s.cfg.Now()
	d.Total = len(nodes)
	d.States, d.Versions = fleetview.Counts(nodes)
	d.VersionChart = versionChart(d.Versions, d.Total)
	d.Pages = max(1, (len(nodes)+PageSize-1)/PageSize)
	d.Page = min(d.Page, d.Pages)
	start := (d.Page - 1) * PageSize
	for _, n := range nodes[start:min(start+PageSize, len(nodes))] {
		d.Rows = append(d.Rows, rowOf(n, now))
	}
	link := func(page int) string {
		v := url.Values{}
		if d.Select != "" {
			v.Set("select", d.Select)
		}
		v.Set("page", strconv.Itoa(page))
		return "/?" + v.Encode()
	}
	if d.Page > 1 {
		d.Prev = link(d.Page - 1)
	}
	if d.Page < d.Pages {
		d.Next = link(d.Page + 1)
	}
	d.Drift = s.driftChart(r.Context(), nodes, now)
	s.page(w, r, "fleet.html", "Fleet", d)
}

func rowOf(n client.NodeStatus, now time.Time) nodeRow {
	cell := func(name string) string { return fleetview.NodeCell(name, n, now) }
	return nodeRow{
		Node: n.Node, State: n.State, Reason: n.Reason, Version: cell("version"),
		Desired: cell("desired"), Applied: cell("applied"), Drift: cell("drifted"),
		Failing: cell("failed"), Heard: cell("last-heard"), Labels: cell("labels"),
	}
}

// fleetJSON is the fleet's nodes as JSON, filtered by ?select as the page
// is; each heartbeat without the digest of its node's report.
func (s *Server) fleetJSON(w http.ResponseWriter, r *http.Request) {
	sel, err := labels.Parse(r.URL.Query().Get("select"))
	if err != nil {
		s.fail(w, r, http.StatusBadRequest, err)
		return
	}
	nodes, err := s.cfg.Client.Nodes(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	nodes = client.Select(nodes, sel)
	if nodes == nil {
		nodes = []client.NodeStatus{}
	}
	for i := range nodes {
		nodes[i] = withoutDigests(nodes[i])
	}
	s.json(w, r, nodes)
}

// withoutDigests is n without what is keyed by the node alone: the digest
// of its report, which no page shows.
func withoutDigests(n client.NodeStatus) client.NodeStatus {
	if n.Heartbeat != nil {
		hb := *n.Heartbeat
		hb.Report = ""
		n.Heartbeat = &hb
	}
	return n
}

// driftChart is drift found and repaired per hour over the last
// driftHours, across the nodes selected, from the records the events
// stream stored in that time (at most maxDriftRecords, the latest).
func (s *Server) driftChart(ctx context.Context, nodes []client.NodeStatus, now time.Time) driftChart {
	first := now.Truncate(time.Hour).Add(-(driftHours - 1) * time.Hour)
	selected := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		selected[n.Node] = true
	}
	found, repaired := make([]int, driftHours), make([]int, driftHours)
	// A repair is a resource.applied whose cause is the drift.observed
	// that found it (the host journals it so), and which did not fail.
	drifts := map[string]map[uint64]bool{}
	rec, err := s.cfg.Client.RecentRecords(ctx, first, maxDriftRecords, func(node string, r event.Record) {
		if !selected[node] {
			return
		}
		hour := int(r.Time.Sub(first) / time.Hour)
		if r.Time.Before(first) || hour >= driftHours {
			hour = -1 // the node's clock is off: its record is not drawn
		}
		switch r.Kind {
		case event.DriftObserved:
			if drifts[node] == nil {
				drifts[node] = map[uint64]bool{}
			}
			drifts[node][r.Seq] = true
			if hour >= 0 {
				found[hour]++
			}
		case event.ResourceApplied:
			if r.Cause == 0 || !drifts[node][r.Cause] || hour < 0 || failedApply(r) {
				return
			}
			repaired[hour]++
		}
	})
	c := newDriftChart(first, found, repaired)
	c.Nodes, c.Read, c.Capped = len(nodes), rec.Read, rec.Capped
	if err != nil && !errors.Is(err, context.Canceled) {
		c.Problem = fmt.Sprintf("the events stream could not be read: %v", err)
	}
	if rec.Capped {
		c.From = rec.From
	}
	return c
}

// failedApply says whether a resource.applied records a failure.
func failedApply(r event.Record) bool {
	var p event.ResourceAppliedPayload
	return json.Unmarshal(r.Payload, &p) != nil || p.Error != ""
}
