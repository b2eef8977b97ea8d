package web

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// cookieName holds the operator's web token once the login page took it.
const cookieName = "mesh_web"

// maxLoginForm bounds what the login form's body is read to.
const maxLoginForm = 4 << 10

type claimsKey struct{}

// operatorOf is the operator whose token authenticated r.
func operatorOf(r *http.Request) authority.WebClaims {
	c, _ := r.Context().Value(claimsKey{}).(authority.WebClaims)
	return c
}

// token is the token r presents: its Authorization bearer token (a
// script, a scraper), else its cookie (a browser).
func token(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if t, ok := strings.CutPrefix(h, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
		return ""
	}
	if c, err := r.Cookie(cookieName); err == nil {
		return c.Value
	}
	return ""
}

// authenticated serves next only to a request with a valid web token;
// every other is answered 401: a browser asking for a page is shown the
// login form with it, anything else a short reason.
func (s *Server) authenticated(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := token(r)
		c, err := s.cfg.Tokens.Verify(tok, s.cfg.Now())
		if err != nil {
			s.unauthorized(w, r, tok, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, c)))
	})
}

// unauthorized answers 401. A presented token that does not verify is
// logged by its reason (never the token), and its cookie dropped.
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, tok string, err error) {
	why := "a web token is needed: meshctl web token prints one"
	if tok != "" {
		why = err.Error()
		s.cfg.Log.Info("web: token refused", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
		http.SetCookie(w, s.cookie("", -1))
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="meshctl"`)
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
		s.render(w, r, http.StatusUnauthorized, "login.html", loginData{Mesh: s.cfg.Mesh, Problem: why, Next: localPath(r.URL.RequestURI())})
		return
	}
	http.Error(w, why, http.StatusUnauthorized)
}

type loginData struct {
	Mesh, Problem, Next string
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	s.render(w, r, http.StatusOK, "login.html", loginData{Mesh: s.cfg.Mesh, Next: localPath(r.URL.Query().Get("next"))})
}

// login takes the token from the login form once and keeps it in a
// cookie the page's scripts cannot read, sent to this origin only.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "a login from another site is refused", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "the login form does not read", http.StatusBadRequest)
		return
	}
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	next := localPath(r.PostForm.Get("next"))
	c, err := s.cfg.Tokens.Verify(tok, s.cfg.Now())
	if err != nil {
		if tok != "" {
			s.cfg.Log.Info("web: login refused", "remote", r.RemoteAddr, "err", err)
		}
		if tok == "" {
			err = errors.New("paste the token meshctl web token printed")
		}
		w.Header().Set("Cache-Control", "no-store")
		s.render(w, r, http.StatusUnauthorized, "login.html", loginData{Mesh: s.cfg.Mesh, Problem: err.Error(), Next: next})
		return
	}
	s.cfg.Log.Info("web: operator logged in", "operator", c.Operator, "token", c.ID, "expires", c.Expires, "remote", r.RemoteAddr)
	http.SetCookie(w, s.cookie(tok, int(c.Expires.Sub(s.cfg.Now()).Seconds())))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "a logout from another site is refused", http.StatusForbidden)
		return
	}
	http.SetCookie(w, s.cookie("", -1))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// cookie holds tok for maxAge seconds (negative: drop it).
func (s *Server) cookie(tok string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: cookieName, Value: tok, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.cfg.Secure,
	}
}

// sameOrigin says whether a form was posted from this site: a browser
// sends Origin with every POST, and another site's page cannot forge it.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "null" {
		// What a browser sends for this view's own forms, whose
		// Referrer-Policy is no-referrer, and for a page of an opaque
		// origin (a sandboxed frame, a data: URL): only Sec-Fetch-Site,
		// which no page can set, tells them apart.
		return r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	if o == "" {
		// Not a browser's form (a script): it can send any header anyway.
		return r.Header.Get("Sec-Fetch-Site") == "" || r.Header.Get("Sec-Fetch-Site") == "same-origin"
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// localPath is p when it is a path of this site, else "/": where a login
// goes next is never another site.
func localPath(p string) string {
	if !strings.HasPrefix(p, "/") || strings.HasPrefix(p, "//") || strings.HasPrefix(p, "/\\") || strings.ContainsAny(p, "\r\n") || p == "/login" {
		return "/"
	}
	return p
}
