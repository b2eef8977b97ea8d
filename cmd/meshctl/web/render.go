package web

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"time"
)

// funcs are the templates' helpers. Each returns text for html/template
// to escape in its context, never template.HTML built from input.
var funcs = template.FuncMap{
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return now.Sub(t).Truncate(time.Second).String() + " ago"
	},
	"utc": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
}

// page is what every page's layout shows around its own data.
type page struct {
	Mesh     string
	Operator string
	Title    string
	Now      time.Time
	Data     any
}

// render executes the template name with data into a buffer first, so a
// failure is a 500 rather than half a page.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.pages.ExecuteTemplate(&buf, name, data); err != nil {
		s.cfg.Log.Error("web: render", "page", name, "path", r.URL.Path, "err", err)
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// page renders name inside the layout for the operator of r.
func (s *Server) page(w http.ResponseWriter, r *http.Request, name, title string, data any) {
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, http.StatusOK, name, page{Mesh: s.cfg.Mesh, Operator: operatorOf(r).Operator, Title: title, Now: s.cfg.Now(), Data: data})
}

// json writes v as JSON: what a page's script polls, and a script's API.
func (s *Server) json(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.cfg.Log.Error("web: encode", "path", r.URL.Path, "err", err)
		http.Error(w, "the answer could not be encoded", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// fail answers a read that failed: the operator is told, the log keeps it.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, err error) {
	s.cfg.Log.Warn("web: request failed", "path", r.URL.Path, "status", status, "err", err)
	http.Error(w, err.Error(), status)
}
