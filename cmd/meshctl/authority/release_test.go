package authority

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/internal/basetest"
)

var hostBuild = []basetest.Entry{{Name: "mesh-host", Mode: 0o755, Body: "#!/bin/sh\necho host\n"}}

func digestOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// TestStoreRelease: every format a node unpacks is stored under its digest
// and format, read from the content whatever the file is called.
func TestStoreRelease(t *testing.T) {
	src, releases := t.TempDir(), filepath.Join(t.TempDir(), "releases")
	for _, format := range releaseFormats {
		t.Run(format, func(t *testing.T) {
			path := basetest.Pack(t, src, format, hostBuild)
			// A misleading name: the content decides.
			misnamed := path + ".bin"
			if err := os.Rename(path, misnamed); err != nil {
				t.Fatal(err)
			}
			r, err := StoreRelease(releases, misnamed)
			if err != nil {
				t.Fatal(err)
			}
			if want := digestOf(t, misnamed); r.Digest != want || r.Format != format {
				t.Errorf("got %+v, want digest %s format %s", r, want, format)
			}
			stored := filepath.Join(releases, r.Name())
			if got := digestOf(t, stored); got != r.Digest {
				t.Errorf("stored %s has digest %s", stored, got)
			}
			if fi, err := os.Stat(stored); err != nil || fi.Mode().Perm() != 0o644 {
				t.Errorf("stored %s: %v, %v; want mode 0644", stored, fi, err)
			}
			// Stored again: the same, and nothing else left behind.
			if again, err := StoreRelease(releases, misnamed); err != nil || again != r {
				t.Errorf("second store: %+v, %v", again, err)
			}
		})
	}
	entries, _ := os.ReadDir(releases)
	if len(entries) != len(releaseFormats) {
		t.Errorf("releases holds %d files, want %d", len(entries), len(releaseFormats))
	}

	// A release packed with the real tar, as people make them.
	stage := t.TempDir()
	if err := os.WriteFile(filepath.Join(stage, "mesh-host"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(src, "real.tar.gz")
	if out, err := exec.Command("tar", "-czf", real, "-C", stage, "./mesh-host").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	if r, err := StoreRelease(releases, real); err != nil || r.Format != "tar.gz" {
		t.Errorf("a tar.gz made by tar: %+v, %v", r, err)
	}
}

func TestStoreReleaseRefuses(t *testing.T) {
	src, releases := t.TempDir(), filepath.Join(t.TempDir(), "releases")
	empty := filepath.Join(src, "empty")
	os.WriteFile(empty, nil, 0o644)
	text := filepath.Join(src, "text")
	os.WriteFile(text, []byte("#!/bin/sh\necho not an archive\n"), 0o755)
	for _, tc := range []struct {
		name, path, want string
	}{
		{"empty", empty, "the file is empty"},
		{"not an archive", text, "not an archive a node can unpack (tar, tar.gz, tar.zst, zip)"},
		{"no mesh-host", basetest.Pack(t, src, "tar.gz", []basetest.Entry{{Name: "README", Mode: 0o644, Body: "hi"}}), "it holds no mesh-host at its top"},
		{"mesh-host below the top", basetest.Pack(t, src, "tar.gz", []basetest.Entry{{Name: "bin/", Mode: 0o755, Body: ""}, {Name: "bin/mesh-host", Mode: 0o755, Body: "x"}}), "it holds no mesh-host at its top"},
		{"not executable", basetest.Pack(t, src, "tar.zst", []basetest.Entry{{Name: "mesh-host", Mode: 0o644, Body: "x"}}), "its mesh-host is not executable (mode -rw-r--r--)"},
		{"zip, not executable", basetest.Pack(t, src, "zip", []basetest.Entry{{Name: "mesh-host", Mode: 0o600, Body: "x"}}), "its mesh-host is not executable"},
		{"a directory", basetest.Pack(t, src, "tar", []basetest.Entry{{Name: "mesh-host/", Mode: 0o755, Body: ""}}), "its mesh-host is not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := StoreRelease(releases, tc.path)
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want ErrRefused saying %q", err, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(releases); len(entries) != 0 {
		t.Errorf("refused builds left %d files in releases", len(entries))
	}
}

// rawGet sends path as the request target byte for byte (no client
// cleaning it) and returns the status code.
func rawGet(t *testing.T, addr, method, path string) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", method, path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func TestReleaseServer(t *testing.T) {
	dir := t.TempDir()
	releases := filepath.Join(dir, "releases")
	r, err := StoreRelease(releases, basetest.Pack(t, dir, "tar.gz", hostBuild))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := os.ReadFile(filepath.Join(releases, r.Name()))
	// Things beside and inside the directory that must not be served.
	os.WriteFile(filepath.Join(dir, "secret"), []byte("secret"), 0o600)
	other := strings.Repeat("a", 64) + ".zip"
	if err := os.Symlink(filepath.Join(dir, "secret"), filepath.Join(releases, other)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&ReleaseServer{Dir: releases})
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	resp, err := http.Get(srv.URL + "/" + r.Name())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
		t.Fatalf("GET /%s: %s, %d bytes; want 200 and the release", r.Name(), resp.Status, len(got))
	}
	// A node's fetch may resume.
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/"+r.Name(), nil)
	req.Header.Set("Range", "bytes=2-")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusPartialContent {
		t.Errorf("range request: %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
	if code := rawGet(t, addr, "HEAD", "/"+r.Name()); code != http.StatusOK {
		t.Errorf("HEAD: %d", code)
	}

	hex := strings.TrimSuffix(r.Name(), ".tar.gz")
	for _, path := range []string{
		"/", // no listing
		"/" + strings.Repeat("b", 64) + ".tar.gz", // well formed, not stored
		"/" + other,        // a symlink, even to a readable file
		"/" + hex,          // no format
		"/" + hex + ".tgz", // not a format name
		"/" + strings.ToUpper(hex) + ".tar.gz",
		"/../secret",
		"/..%2fsecret",
		"/%2e%2e/secret",
		"/x/../" + r.Name(), // resolved, it would be the release: refused unresolved
		"//" + r.Name(),
		"/" + r.Name() + "/",
		"/" + r.Name() + "%00",
		"/releases/" + r.Name(),
		"/.release-123",
	} {
		if code := rawGet(t, addr, "GET", path); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
	if code := rawGet(t, addr, "POST", "/"+r.Name()); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", code)
	}
}

// release is a release stored for the tests: digest from a format and a
// byte that differs.
