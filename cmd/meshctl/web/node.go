package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/cmd/internal/statusview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// maxHistory bounds the node page's timeline: its latest records.
const maxHistory = 50

// nodeData is the node page, and /api/nodes/{node}.
type nodeData struct {
	Node     string         `json:"node"`
	Status   *nodeRow       `json:"status,omitempty"`
	Hostname string         `json:"hostname,omitempty"`
	Report   *reportSummary `json:"report,omitempty"`
	// ReportProblem says why there is no report to show.
	ReportProblem string       `json:"report_problem,omitempty"`
	LastGood      string       `json:"last_good"`
	Desired       string       `json:"desired"`
	Behind        string       `json:"behind,omitempty"`
	Failing       []failing    `json:"failing"`
	Refreshes     []refresh    `json:"refreshes"`
	Facts         [][2]string  `json:"facts"`
	History       []recordView `json:"history"`
	HistoryNote   string       `json:"history_note,omitempty"`
	Verify        verifyView   `json:"verify"`
}

type reportSummary struct {
	Sent    time.Time `json:"sent"`
	Head    uint64    `json:"head"`
	Current bool      `json:"current"`
	Omitted string    `json:"omitted,omitempty"`
}

type failing struct {
	Resource string `json:"resource"`
	// Outcome is "failed" (its last apply failed), "never applied" or
	// "skipped" (one it depends on failed).
	Outcome string `json:"outcome"`
	Reason  string `json:"reason"`
	Seq     uint64 `json:"seq"`
}

type refresh struct {
	Resource string    `json:"resource"`
	Refresh  string    `json:"refresh"`
	Since    time.Time `json:"since"`
	Seq      uint64    `json:"seq"`
	Sources  string    `json:"sources"`
	Error    string    `json:"error,omitempty"`
}

// recordView is a journal record as the timeline shows it: its kind,
// resource and time, and the fields of its payload a person reads it for.
type recordView struct {
	Seq      uint64    `json:"seq"`
	Time     time.Time `json:"time"`
	Kind     string    `json:"kind"`
	Cause    uint64    `json:"cause,omitempty"`
	Resource string    `json:"resource,omitempty"`
	Detail   string    `json:"detail,omitempty"`
}

// verifyView is what `meshctl replay NODE --verify` says: Word is
// "holds" or "differs", or "unknown" when it could not be checked.
type verifyView struct {
	Word string   `json:"word"`
	Text string   `json:"text"`
	Diff []string `json:"diff,omitempty"`
}

// node is a node's page.
func (s *Server) node(w http.ResponseWriter, r *http.Request) {
	d, ok := s.nodeData(w, r)
	if ok {
		s.page(w, r, "node.html", d.Node, d)
	}
}

func (s *Server) nodeJSON(w http.ResponseWriter, r *http.Request) {
	d, ok := s.nodeData(w, r)
	if ok {
		s.json(w, r, d)
	}
}

// known answers 404 for a node the mesh does not know (a name that is
// not one included), and says whether it is known.
func (s *Server) known(w http.ResponseWriter, r *http.Request, node string) bool {
	if linkproto.ValidName(node) != nil {
		s.notFound(w, r, "no node is called that")
		return false
	}
	err := s.cfg.Client.MustKnow(r.Context(), node)
	switch {
	case errors.Is(err, client.ErrUnknownNode):
		s.notFound(w, r, err.Error())
		return false
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return false
	}
	return true
}

func (s *Server) nodeData(w http.ResponseWriter, r *http.Request) (nodeData, bool) {
	node := r.PathValue("node")
	d := nodeData{Node: node, Failing: []failing{}, Refreshes: []refresh{}, Facts: [][2]string{}, History: []recordView{}}
	if !s.known(w, r, node) {
		return d, false
	}
	ctx := r.Context()
	now := s.cfg.Now()
	// Its own entries, not the fleet's listing: one node of 10,000.
	if st, ok, err := s.cfg.Client.Node(ctx, node); err == nil && ok {
		row := rowOf(st, now)
		d.Status = &row
	}
	rep, err := s.cfg.Client.Report(ctx, node)
	if err != nil {
		d.ReportProblem = err.Error()
	} else {
		d.Report = &reportSummary{Sent: rep.Sent, Head: rep.State.Head, Current: rep.Current, Omitted: rep.Omitted}
		d.fromState(rep.State)
	}
	d.History, d.HistoryNote = s.history(r, node)
	d.Verify = s.verify(r, node)
	return d, true
}

// fromState fills the report's sections, in the words `meshctl status`
// uses, without a digest: those are keyed by the node's declaration.
func (d *nodeData) fromState(st projector.State) {
	if f := st.Facts; f != nil {
		d.Hostname = f.Hostname
		osName := strings.TrimSpace(f.OSID + " " + f.OSVersion)
		d.Facts = [][2]string{
			{"hostname", f.Hostname}, {"os", osName}, {"arch", f.Arch}, {"kernel", f.Kernel},
			{"cores", fmt.Sprint(f.Cores)}, {"memory", fmt.Sprintf("%d MiB", f.MemoryMB)},
			{"addresses", strings.Join(f.Addresses, " ")}, {"boot", f.BootID}, {"host build", f.Version},
		}
	}
	if g := st.LastGood; g != nil {
		d.LastGood = fmt.Sprintf("revision %d, declared at #%d, converged at #%d, %s", g.Revision, g.Seq, g.Converged, g.At.UTC().Format(journalview.TimeLayout))
	} else {
		d.LastGood = "none: no declaration has converged"
	}
	if de := st.Desired; de != nil {
		d.Desired = fmt.Sprintf("revision %d, %d resources, declared at #%d", de.Revision, len(de.Resources), de.Seq)
		if g := st.LastGood; g == nil || g.Revision != de.Revision {
			last := "none"
			if g != nil {
				last = fmt.Sprint(g.Revision)
			}
			d.Behind = fmt.Sprintf("last good %s, desired %d", last, de.Revision)
		}
	} else {
		d.Desired = "no declaration received"
	}
	for id, o := range st.Owned {
		if o.Error != "" {
			d.Failing = append(d.Failing, failing{Resource: id, Outcome: "failed", Reason: o.Error, Seq: o.Seq})
		}
	}
	for id, f := range st.Failing {
		d.Failing = append(d.Failing, failing{Resource: id, Outcome: "never applied", Reason: f.Error, Seq: f.Seq})
	}
	for id, k := range st.Skipped {
		d.Failing = append(d.Failing, failing{Resource: id, Outcome: "skipped", Reason: k.Requirement + " failed", Seq: k.Seq})
	}
	slices.SortFunc(d.Failing, func(a, b failing) int { return strings.Compare(a.Resource, b.Resource) })
	for _, id := range slices.Sorted(maps.Keys(st.Refreshes)) {
		o := st.Refreshes[id]
		d.Refreshes = append(d.Refreshes, refresh{Resource: id, Refresh: o.Refresh, Since: o.Since, Seq: o.Seq, Sources: statusview.RefreshSources(o), Error: o.Error})
	}
}

// history is the node's latest maxHistory records, newest first.
func (s *Server) history(r *http.Request, node string) ([]recordView, string) {
	ring := make([]event.Record, 0, maxHistory)
	var total int
	err := s.cfg.Client.Records(r.Context(), node, 1, func(rec event.Record) error {
		if len(ring) == maxHistory {
			copy(ring, ring[1:])
			ring = ring[:maxHistory-1]
		}
		ring = append(ring, rec)
		total++
		return nil
	})
	out := make([]recordView, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		out = append(out, viewOf(ring[i]))
	}
	note := ""
	if total > maxHistory {
		note = fmt.Sprintf("the latest %d of the %d records the events stream holds: meshctl journal %s shows them all", maxHistory, total, node)
	}
	if err != nil {
		note = strings.TrimSpace(note + " " + fmt.Sprintf("(the events stream could not be read whole: %v)", err))
	}
	return out, note
}

// shownFields are the payload fields the timeline shows, in this order:
// what a person reads a record for. Digests, signatures and documents
// are left out: they are keyed by the node's declaration, and `meshctl
// journal` has them.
var shownFields = []string{"action", "trigger", "revision", "result", "changed", "unchanged", "failed", "differs", "refresh", "change", "operator", "source", "error", "reason", "refused", "note"}

func viewOf(r event.Record) recordView {
	v := recordView{Seq: r.Seq, Time: r.Time, Kind: string(r.Kind), Cause: r.Cause, Resource: r.Resource}
	var fields map[string]json.RawMessage
	if json.Unmarshal(r.Payload, &fields) != nil {
		return v
	}
	var parts []string
	for _, k := range shownFields {
		raw, ok := fields[k]
		if !ok || len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var val string
		if raw[0] == '"' {
			_ = json.Unmarshal(raw, &val)
		} else {
			var b bytes.Buffer
			if json.Compact(&b, raw) == nil {
				val = b.String()
			}
		}
		parts = append(parts, k+"="+val)
	}
	v.Detail = redactDigests(strings.Join(parts, " "))
	return v
}

// digestPattern is a digest as the mesh writes one.
var digestPattern = regexp.MustCompile(`sha256:[0-9a-fA-F]+`)

// redactDigests replaces each digest in s: a node's words (a diff of its
// state, an error) may quote one, and no page shows them.
func redactDigests(s string) string {
	return digestPattern.ReplaceAllString(s, "(a digest)")
}

// verify is `meshctl replay NODE --verify`, in its words.
func (s *Server) verify(r *http.Request, node string) verifyView {
	rep, replayed, diff, err := s.cfg.Client.Verify(r.Context(), node)
	if err != nil {
		return verifyView{Word: "unknown", Text: "unknown: " + redactDigests(err.Error())}
	}
	if len(diff) == 0 {
		return verifyView{Word: "holds", Text: fmt.Sprintf("holds: replay of %d records from the events stream matches what %s reported at head #%d", replayed.Records, node, rep.State.Head)}
	}
	v := verifyView{Word: "differs", Text: fmt.Sprintf("differs: replay of %d records from the events stream disagrees with what %s reported at head #%d (replayed != reported):", replayed.Records, node, rep.State.Head)}
	for _, l := range diff {
		v.Diff = append(v.Diff, redactDigests(l))
	}
	return v
}

// whyData is the why page: what `meshctl journal NODE --why ID` shows.
type whyData struct {
	Node, Resource string
	Problem        string
	DroppedBy      *recordView
	Chain          []recordView
	HeldBy         *recordView
	// Stops says why the chain ends before a record that starts one.
	Stops string
}

func (s *Server) why(w http.ResponseWriter, r *http.Request) {
	node := r.PathValue("node")
	if !s.known(w, r, node) {
		return
	}
	d := whyData{Node: node, Resource: r.URL.Query().Get("resource")}
	why, err := s.cfg.Client.Why(r.Context(), node, d.Resource)
	switch {
	case errors.Is(err, client.ErrNoRecord):
		s.notFound(w, r, err.Error())
		return
	case err != nil:
		d.Problem = err.Error()
	}
	if why.DroppedBy != nil {
		v := viewOf(*why.DroppedBy)
		d.DroppedBy = &v
	}
	for _, rec := range why.Chain {
		d.Chain = append(d.Chain, viewOf(rec))
	}
	if why.HeldBy != nil {
		v := viewOf(*why.HeldBy)
		d.HeldBy = &v
	}
	if n := len(why.Chain); n > 0 {
		if last := why.Chain[n-1]; !journalview.IsOrigin(last.Kind) {
			if last.Cause == 0 {
				d.Stops = fmt.Sprintf("(#%d names no cause)", last.Seq)
			} else {
				d.Stops = fmt.Sprintf("(#%d was caused by #%d, which the events stream does not hold)", last.Seq, last.Cause)
			}
		}
	}
	s.page(w, r, "why.html", "Why "+d.Resource, d)
}
