package web

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
)

// rolloutRow is one rollout of the list, as `meshctl rollout list` shows it.
type rolloutRow struct {
	ID        string `json:"id"`
	Kind      string `json:"kind"`
	State     string `json:"state"`
	Operator  string `json:"operator"`
	Selector  string `json:"selector"`
	Created   string `json:"created"`
	Nodes     int    `json:"nodes"`
	Converged int    `json:"converged"`
	Failed    int    `json:"failed"`
}

func (s *Server) rolloutRows(r *http.Request) ([]rolloutRow, error) {
	all, err := s.cfg.Client.Rollouts(r.Context())
	if err != nil {
		return nil, err
	}
	rows := make([]rolloutRow, 0, len(all))
	for _, ro := range slices.Backward(all) { // newest first
		c := ro.Counts()
		rows = append(rows, rolloutRow{
			ID: ro.ID, Kind: ro.Kind, State: string(ro.State), Operator: ro.Operator, Selector: ro.Selector,
			Created: utc(ro.Created), Nodes: len(ro.Nodes), Converged: c[rollout.StepConverged], Failed: c[rollout.StepFailed],
		})
	}
	return rows, nil
}

func (s *Server) rollouts(w http.ResponseWriter, r *http.Request) {
	rows, err := s.rolloutRows(r)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	s.page(w, r, "rollouts.html", "Rollouts", rows)
}

func (s *Server) rolloutsJSON(w http.ResponseWriter, r *http.Request) {
	rows, err := s.rolloutRows(r)
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	s.json(w, r, rows)
}

// rolloutView is a rollout's page, and what its script polls: the record
// as `meshctl rollout status --json` gives it, its waves drawn, and what
// changed since it halted.
type rolloutView struct {
	Rollout   *rollout.Rollout `json:"rollout"`
	Summary   string           `json:"summary"`
	Waves     []waveView       `json:"waves"`
	SinceHalt []string         `json:"since_halt"`
	// Live is the JSON's path the page's script polls.
	Live string `json:"-"`
}

type waveView struct {
	N        int            `json:"n"`
	Name     string         `json:"name"`
	Summary  string         `json:"summary"`
	Progress progress       `json:"progress"`
	Nodes    []rollout.Node `json:"nodes"`
}

func (s *Server) rolloutView(w http.ResponseWriter, r *http.Request) (rolloutView, bool) {
	id := r.PathValue("id")
	ro, err := s.cfg.Client.GetRollout(r.Context(), id)
	switch {
	// "" would be the latest: a page names its rollout.
	case id == "" || errors.Is(err, client.ErrRefused):
		s.notFound(w, r, fmt.Sprintf("there is no rollout %q", id))
		return rolloutView{}, false
	case err != nil:
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return rolloutView{}, false
	}
	v := rolloutView{Rollout: ro, Summary: ro.Summary(), SinceHalt: s.cfg.Client.SinceHalt(r.Context(), ro), Live: "/api/rollouts/" + ro.ID}
	if v.SinceHalt == nil {
		v.SinceHalt = []string{}
	}
	for n := range ro.Waves() {
		var nodes []rollout.Node
		for _, node := range ro.Nodes {
			if node.Wave == n {
				nodes = append(nodes, node)
			}
		}
		name := "wave " + strconv.Itoa(n)
		if n == 0 && ro.Canary > 0 {
			name += " (canary)"
		}
		v.Waves = append(v.Waves, waveView{N: n, Name: name, Summary: stepSummary(nodes), Progress: progressOf(nodes), Nodes: nodes})
	}
	return v, true
}

func (v rolloutView) livePath() string { return v.Live }

func (s *Server) rollout(w http.ResponseWriter, r *http.Request) {
	if v, ok := s.rolloutView(w, r); ok {
		s.page(w, r, "rollout.html", "Rollout "+v.Rollout.ID, v)
	}
}

func (s *Server) rolloutJSON(w http.ResponseWriter, r *http.Request) {
	if v, ok := s.rolloutView(w, r); ok {
		s.json(w, r, v)
	}
}
