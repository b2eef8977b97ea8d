package web

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"strings"
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
	"utc": utc,
	"add": func(a, b int) int { return a + b },
	// stateClass is a state as a class name: "never heard" is
	// state-never-heard. The states are the client's words, not a node's.
	"stateClass": func(state string) string { return strings.ReplaceAll(state, " ", "-") },
	"maxDrift":   func() int { return maxDriftRecords },
	// nodeLink and whyLink are paths with each name path- or
	// query-escaped: a name never makes another path.
	"nodeLink": func(node string) string { return "/nodes/" + url.PathEscape(node) },
	"whyLink": func(node, resource string) string {
		return "/nodes/" + url.PathEscape(node) + "/why?resource=" + url.QueryEscape(resource)
	},
	"rolloutLink": func(id string) string { return "/rollouts/" + url.PathEscape(id) },
	// rec pairs a record with its node, for the "record" template.
	"rec": func(node string, r recordView) any {
		return struct {
			Node string
			R    recordView
		}{node, r}
	},
}

func utc(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// page is what every page's layout shows around its own data.
type page struct {
	Mesh     string
	Operator string
	Title    string
	Now      time.Time
	// Live is the JSON the page's script polls to keep it up to date;
	// "" for a page that stays as it was drawn.
	Live string
	Data any
}

// live is a page's data that is kept up to date.
type live interface{ livePath() string }

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
	s.pageStatus(w, r, http.StatusOK, name, title, data)
}

// pageStatus is page answering status: a page that says what was wrong
// with the request (a selector that does not parse) is still a page.
func (s *Server) pageStatus(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	w.Header().Set("Cache-Control", "no-store")
	p := page{Mesh: s.cfg.Mesh, Operator: operatorOf(r).Operator, Title: title, Now: s.cfg.Now(), Data: data}
	if l, ok := data.(live); ok {
		p.Live = l.livePath()
	}
	s.render(w, r, status, name, p)
}

// notFound answers 404: a page saying why to a browser, the reason alone
// to a script.
func (s *Server) notFound(w http.ResponseWriter, r *http.Request, why string) {
	if !strings.Contains(r.Header.Get("Accept"), "text/html") {
		w.Header().Set("Cache-Control", "no-store")
		http.Error(w, why, http.StatusNotFound)
		return
	}
	s.pageStatus(w, r, http.StatusNotFound, "notfound.html", "Not found", why)
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
