package web

import (
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
)

// Verifier checks an operator's web token (authority.WebVerifier).
type Verifier interface {
	Verify(tok string, now time.Time) (authority.WebClaims, error)
}

// Config is what the web view is told.
type Config struct {
	// Client reads the fleet, as the operator's commands do.
	Client *client.Client
	// Mesh is the mesh's name, shown on every page.
	Mesh string
	// Tokens checks the operator's web tokens.
	Tokens Verifier
	// Metrics serves /metrics; nil: 404.
	Metrics http.Handler
	// MetricsOpen serves /metrics without a token (a scraper inside a
	// trusted network); otherwise it asks for one, as a bearer token.
	MetricsOpen bool
	// Secure says the view is served over TLS: its cookie is then Secure.
	Secure bool
	Log    *slog.Logger
	// Now is the clock tokens are checked against; nil: time.Now.
	Now func() time.Time
}

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Server is the web view.
type Server struct {
	cfg   Config
	pages *template.Template
	mux   *http.ServeMux
}

// New returns the web view of cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	pages, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/*.html")
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, pages: pages, mux: http.NewServeMux()}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, err
	}
	// Open: what a probe or the login page needs.
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /favicon.ico", s.favicon)
	s.mux.HandleFunc("GET /login", s.loginPage)
	s.mux.HandleFunc("POST /login", s.login)
	s.mux.HandleFunc("POST /logout", s.logout)
	if cfg.Metrics != nil {
		if cfg.MetricsOpen {
			s.mux.Handle("GET /metrics", cfg.Metrics)
		} else {
			s.mux.Handle("GET /metrics", s.authenticated(cfg.Metrics))
		}
	}
	// Everything else is the operator's only.
	s.routes()
	return s, nil
}

// ServeHTTP serves every request with the headers that keep a page to
// itself: its own scripts and styles only, never framed, no referrer.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if s.cfg.Secure {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	s.mux.ServeHTTP(w, r)
}

// contentSecurityPolicy: nothing inline, nothing from elsewhere; a page
// may only fetch its own JSON and submit its own forms.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// favicon is the view's icon where a browser asks for it by default, so
// that no page's console shows a 404 for it.
func (s *Server) favicon(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=86400")
	http.ServeFileFS(w, r, staticFiles, "static/favicon.svg")
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte("ok\n"))
}
