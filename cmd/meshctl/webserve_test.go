package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// webURL is the address the web view's log line names.
func webURL(t *testing.T, log *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`msg="web view served" url=(\S+)`)
	var url string
	basetest.Eventually(t, 10*time.Second, func() error {
		m := re.FindStringSubmatch(log.String())
		if m == nil {
			return fmt.Errorf("no web view in the log:\n%s", log)
		}
		url = m[1]
		return nil
	})
	return url
}

func webToken(t *testing.T, data string) string {
	t.Helper()
	code, stdout, stderr := meshctl(t, "--data", data, "--operator", "alice@ops", "web", "token", "--ttl", "1h")
	if code != command.ExitOK || !strings.HasPrefix(stdout, "meshweb1.") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("web token: exit %d\n%s%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "a web token for alice@ops of mesh home, valid until ") || strings.Contains(stderr, strings.TrimSpace(stdout)) {
		t.Errorf("web token's note: %q", stderr)
	}
	return strings.TrimSpace(stdout)
}

func get(t *testing.T, c *http.Client, url, tok string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestWebServedOnLoopbackOverHTTP(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	log := serve(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--releases-listen", "off", "--http-listen", "127.0.0.1:0")
	url := webURL(t, log)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("web view at %s", url)
	}
	tok := webToken(t, data)
	if code, body := get(t, http.DefaultClient, url+"/healthz", ""); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := get(t, http.DefaultClient, url+"/api/nodes", ""); code != http.StatusUnauthorized {
		t.Errorf("/api/nodes without a token: %d", code)
	}
	if code, body := get(t, http.DefaultClient, url+"/api/nodes", tok); code != http.StatusOK || !strings.HasPrefix(body, "[") {
		t.Errorf("/api/nodes with a token: %d %q", code, body)
	}
	if code, _ := get(t, http.DefaultClient, url+"/metrics", ""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d", code)
	}
	basetest.Eventually(t, 10*time.Second, func() error {
		if code, body := get(t, http.DefaultClient, url+"/metrics", tok); code != http.StatusOK || !strings.Contains(body, `mesh_nodes{state="ok"} 0`) || !strings.Contains(body, "# HELP mesh_enrolments_total") {
			return fmt.Errorf("/metrics with a token: %d\n%s", code, body)
		}
		return nil
	})
	if strings.Contains(log.String(), tok) {
		t.Error("the service's log holds the token")
	}
	// A revocation holds at once for the running service.
	if code, stdout, stderr := meshctl(t, "--data", data, "web", "revoke"); code != command.ExitOK || !strings.Contains(stdout, "every web token of mesh home issued before ") {
		t.Fatalf("web revoke: exit %d %s%s", code, stdout, stderr)
	}
	if code, body := get(t, http.DefaultClient, url+"/api/nodes", tok); code != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
		t.Errorf("/api/nodes with a revoked token: %d %q", code, body)
	}
	if code, _ := get(t, http.DefaultClient, url+"/api/nodes", webToken(t, data)); code != http.StatusOK {
		t.Errorf("/api/nodes with a token made after the revocation: %d", code)
	}
}

// Off loopback the view speaks TLS only, with a certificate the mesh's
// CA issued: a plain request is turned away, a client trusting ca.pem
// is served.
func TestWebServedOffLoopbackOverTLSOnly(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	log := serve(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--releases-listen", "off", "--http-listen", "0.0.0.0:0")
	url := webURL(t, log)
	port := url[strings.LastIndex(url, ":")+1:]
	if !strings.HasPrefix(url, "https://") {
		t.Fatalf("web view off loopback at %s", url)
	}
	if code, body := get(t, http.DefaultClient, "http://127.0.0.1:"+port+"/healthz", ""); code == http.StatusOK {
		t.Errorf("plain HTTP off loopback answered %d %q", code, body)
	}
	caPEM, err := os.ReadFile(filepath.Join(data, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	trusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "localhost"}}}
	if code, body := get(t, trusting, "https://127.0.0.1:"+port+"/healthz", ""); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz over TLS: %d %q", code, body)
	}
	tok := webToken(t, data)
	if code, _ := get(t, trusting, "https://127.0.0.1:"+port+"/api/nodes", tok); code != http.StatusOK {
		t.Errorf("/api/nodes over TLS: %d", code)
	}
	// A client that trusts the system's roots, not the mesh's, is refused.
	if _, err := http.Get("https://127.0.0.1:" + port + "/healthz"); err == nil {
		t.Error("a client that does not trust the mesh's CA was served")
	}
}

func TestWebListenClashIsAnError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := meshctl(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--releases-listen", "off", "--http-listen", taken.Addr().String())
	if code == command.ExitOK || !strings.Contains(stderr, "serve the web view") || !strings.Contains(stderr, "--http-listen") {
		t.Errorf("serve on a taken address: exit %d: %s", code, stderr)
	}
}
