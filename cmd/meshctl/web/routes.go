package web

import (
	"net/http"
)

// routes registers the operator's pages and their JSON, each behind the
// operator's token.
func (s *Server) routes() {
	for pattern, h := range map[string]http.HandlerFunc{
		"GET /{$}":               s.fleet,
		"GET /nodes/{node}":      s.node,
		"GET /nodes/{node}/why":  s.why,
		"GET /rollouts":          s.rollouts,
		"GET /rollouts/{id}":     s.rollout,
		"GET /api/nodes":         s.fleetJSON,
		"GET /api/nodes/{node}":  s.nodeJSON,
		"GET /api/rollouts":      s.rolloutsJSON,
		"GET /api/rollouts/{id}": s.rolloutJSON,
	} {
		s.mux.Handle(pattern, s.authenticated(h))
	}
	// Anything else asked of the view is the operator's to be told does
	// not exist, not a stranger's.
	s.mux.Handle("/", s.authenticated(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.notFound(w, r, "there is no such page")
	})))
}
