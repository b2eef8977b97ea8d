package authority

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
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

	"github.com/klauspost/compress/zstd"
)

// entry is one file of a test archive.
type entry struct {
	name string
	mode int64
	body string
}

var hostBuild = []entry{{"mesh-host", 0o755, "#!/bin/sh\necho host\n"}}

// pack writes entries as an archive of format into dir and returns its
// path.
func pack(t *testing.T, dir, format string, entries []entry) string {
	t.Helper()
	var buf bytes.Buffer
	if format == "zip" {
		zw := zip.NewWriter(&buf)
		for _, e := range entries {
			h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
			h.SetMode(os.FileMode(e.mode))
			w, err := zw.CreateHeader(h)
			if err != nil {
				t.Fatal(err)
			}
			io.WriteString(w, e.body)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	} else {
		var w io.WriteCloser = nopCloser{&buf}
		switch format {
		case "tar.gz":
			w = gzip.NewWriter(&buf)
		case "tar.zst":
			zw, err := zstd.NewWriter(&buf)
			if err != nil {
				t.Fatal(err)
			}
			w = zw
		}
		tw := tar.NewWriter(w)
		for _, e := range entries {
			h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
			if strings.HasSuffix(e.name, "/") {
				h.Typeflag, h.Size = tar.TypeDir, 0
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			io.WriteString(tw, e.body)
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.CreateTemp(dir, "build-*."+format)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

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
			path := pack(t, src, format, hostBuild)
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
		{"no mesh-host", pack(t, src, "tar.gz", []entry{{"README", 0o644, "hi"}}), "it holds no mesh-host at its top"},
		{"mesh-host below the top", pack(t, src, "tar.gz", []entry{{"bin/", 0o755, ""}, {"bin/mesh-host", 0o755, "x"}}), "it holds no mesh-host at its top"},
		{"not executable", pack(t, src, "tar.zst", []entry{{"mesh-host", 0o644, "x"}}), "its mesh-host is not executable (mode -rw-r--r--)"},
		{"zip, not executable", pack(t, src, "zip", []entry{{"mesh-host", 0o600, "x"}}), "its mesh-host is not executable"},
		{"a directory", pack(t, src, "tar", []entry{{"mesh-host/", 0o755, ""}}), "its mesh-host is not a regular file"},
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
	r, err := StoreRelease(releases, pack(t, dir, "tar.gz", hostBuild))
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
