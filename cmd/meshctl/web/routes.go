package web

import (
	"net/http"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
)

// routes registers the operator's pages and their JSON, each behind the
// operator's token.
func (s *Server) routes() {
	s.mux.Handle("GET /{$}", s.authenticated(http.HandlerFunc(s.fleet)))
	s.mux.Handle("GET /api/nodes", s.authenticated(http.HandlerFunc(s.fleetJSON)))
	// Anything else asked of the view is the operator's to be told does
	// not exist, not a stranger's.
	s.mux.Handle("/", s.authenticated(http.NotFoundHandler()))
}

func (s *Server) fleet(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.cfg.Client.Nodes(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	s.page(w, r, "fleet.html", "Fleet", nodes)
}

func (s *Server) fleetJSON(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.cfg.Client.Nodes(r.Context())
	if err != nil {
		s.fail(w, r, http.StatusServiceUnavailable, err)
		return
	}
	if nodes == nil {
		nodes = []client.NodeStatus{}
	}
	s.json(w, r, nodes)
}
