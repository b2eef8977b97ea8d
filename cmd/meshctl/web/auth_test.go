package web

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// authBed is a view whose pages need no fleet: what answers before the
// token is checked, and the login.
func authBed(t *testing.T, metricsOpen bool) (*httptest.Server, *authority.Authority) {
	t.Helper()
	a, _, err := authority.Init(t.TempDir(), "home")
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("mesh_nodes 1\n")) })
	s, err := New(Config{Mesh: a.Mesh, Tokens: v, Metrics: metrics, MetricsOpen: metricsOpen})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv, a
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestEveryPageAsksForAToken(t *testing.T) {
	srv, a := authBed(t, false)
	other, _, err := authority.Init(t.TempDir(), "home")
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := other.IssueWebToken("mallory", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	expired, _, err := a.IssueWebToken("alice", time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/", "/api/nodes", "/nodes/web-1", "/rollouts", "/metrics", "/no-such-page"} {
		for name, set := range map[string]func(*http.Request){
			"no token":             func(*http.Request) {},
			"another mesh's token": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+forged) },
			"an expired token":     func(r *http.Request) { r.AddCookie(&http.Cookie{Name: cookieName, Value: expired}) },
			"a cookie of garbage":  func(r *http.Request) { r.AddCookie(&http.Cookie{Name: cookieName, Value: "<script>"}) },
		} {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
			set(req)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with %s: %s, want 401", path, name, resp.Status)
			}
			if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe") {
				t.Errorf("%s: policy %q", path, csp)
			}
		}
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/healthz: %s", resp.Status)
	}
}

func TestMetricsOpenOnlyWhenSaid(t *testing.T) {
	srv, _ := authBed(t, true)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/metrics with --metrics-open: %s", resp.Status)
	}
	resp, err = http.Get(srv.URL + "/api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/api/nodes with --metrics-open: %s, want 401", resp.Status)
	}
}

func TestLoginKeepsTheTokenInAStrictCookie(t *testing.T) {
	srv, a := authBed(t, false)
	tok, _, err := a.IssueWebToken("alice@ops", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	post := func(origin, token, next string) *http.Response {
		form := url.Values{"token": {token}, "next": {next}}
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin)
		resp, err := noRedirects().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := post(srv.URL, tok, "//evil.example/x")
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %s to %q, want 303 to / (never another site)", resp.Status, resp.Header.Get("Location"))
	}
	var c *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == cookieName {
			c = k
		}
	}
	if c == nil || c.Value != tok || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge <= 0 || c.MaxAge > 3600 {
		t.Fatalf("cookie %+v", c)
	}
	// The cookie opens the metrics (and every page).
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
	req.AddCookie(c)
	r2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.StatusCode != http.StatusOK {
		t.Errorf("/metrics with the cookie: %s", r2.Status)
	}
	if resp := post("https://evil.example", tok, "/"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("a login posted from another site: %s, cookies %v", resp.Status, resp.Cookies())
	}
	if resp := post(srv.URL, tok+"x", "/"); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Errorf("a bad token: %s, cookies %v", resp.Status, resp.Cookies())
	}
}

func TestLocalPath(t *testing.T) {
	for in, want := range map[string]string{
		"/nodes/a": "/nodes/a", "//evil": "/", "/\\evil": "/", "https://evil": "/", "": "/", "/login": "/", "/x\r\nSet-Cookie: a": "/",
	} {
		if got := localPath(in); got != want {
			t.Errorf("localPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// A browser posts the view's own forms with Origin "null": the view's
// Referrer-Policy (no-referrer) has it say so. Its Sec-Fetch-Site, which
// no page can set, still tells the view's own form from another site's
// or from an opaque origin's (a sandboxed frame, a data: URL).
func TestSameOriginUnderNoReferrer(t *testing.T) {
	for _, c := range []struct {
		origin, fetchSite string
		want              bool
	}{
		{"http://view.example:8080", "same-origin", true},
		{"null", "same-origin", true},
		{"null", "cross-site", false},
		{"null", "same-site", false},
		{"null", "", false},
		{"https://evil.example", "same-origin", false},
		{"", "", true}, // not a browser: a script can send any header anyway
		{"", "cross-site", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://view.example:8080/login", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.fetchSite != "" {
			r.Header.Set("Sec-Fetch-Site", c.fetchSite)
		}
		if got := sameOrigin(r); got != c.want {
			t.Errorf("Origin %q, Sec-Fetch-Site %q: sameOrigin %v, want %v", c.origin, c.fetchSite, got, c.want)
		}
	}
}
