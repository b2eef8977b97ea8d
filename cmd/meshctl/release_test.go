package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
)

// hostArchive writes a tar.gz holding an executable mesh-host.
func hostArchive(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := "#!/bin/sh\necho a host\n"
	if err := tw.WriteHeader(&tar.Header{Name: "mesh-host", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	io.WriteString(tw, body)
	tw.Close()
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReleaseCommand: serve serves DATA/releases and records where; release
// stores the build there and declares it to each node, whose declaration
// names a source that serves the very bytes.
func TestReleaseCommand(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	archive := filepath.Join(dir, "build.tar.gz")
	hostArchive(t, archive)

	// Before serve ever ran, there is no URL to name.
	if code, _, _ := meshctl(t, "--data", data, "init"); code != command.ExitOK {
		t.Fatal("init failed")
	}
	if code, _, stderr := meshctl(t, "--data", data, "release", archive, "--nodes", "web-1"); code != command.ExitRefused || !strings.Contains(stderr, "no releases URL: start `meshctl serve`") {
		t.Errorf("release before serve: %d %q", code, stderr)
	}

	serve(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--releases-listen", "127.0.0.1:0")
	cfg, err := authority.ReadConfig(data)
	if err != nil || !regexp.MustCompile(`^http://127\.0\.0\.1:[1-9][0-9]*$`).MatchString(cfg.ReleasesURL) {
		t.Fatalf("control.json %+v, %v: want the releases URL", cfg, err)
	}

	code, stdout, stderr := meshctl(t, "--data", data, "release", archive, "--nodes", "web-1,web-2", "--force")
	if code != command.ExitOK {
		t.Fatalf("release: %d\n%s%s", code, stdout, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 3 || !regexp.MustCompile(`^release sha256:[0-9a-f]{64} \(tar\.gz\): nodes fetch http://127\.0\.0\.1:\d+/[0-9a-f]{64}\.tar\.gz into /opt/mesh-host/versions/[0-9a-f]{64}$`).MatchString(lines[0]) ||
		lines[1] != "web-1 is offline: it will get revision 1 when it reconnects" || lines[2] != "web-2 is offline: it will get revision 1 when it reconnects" {
		t.Errorf("release printed:\n%s", stdout)
	}

	// What is stored for web-1 names a source serving the archive.
	urls, _ := authority.ReadConfig(data)
	nc, err := client.Dial(mustOpen(t, data), urls.URLs)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	d := desired(t, nc, "web-1")
	if d.Revision != 1 || len(d.Resources) != 1 {
		t.Fatalf("web-1's declaration: %+v", d)
	}
	doc, _ := d.MarshalJSON()
	source := regexp.MustCompile(`"source":"([^"]+)"`).FindSubmatch(doc)
	if source == nil {
		t.Fatalf("no source in %s", doc)
	}
	resp, err := http.Get(string(source[1]))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want, _ := os.ReadFile(archive)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, want) {
		t.Errorf("GET %s: %s, %d bytes; want the archive's %d", source[1], resp.Status, len(got), len(want))
	}

	// --url overrides; refusals are exit 2.
	code, stdout, _ = meshctl(t, "--data", data, "release", archive, "--nodes", "web-1", "--url", "https://releases.example/mesh/")
	// web-2 was declared for (with --force): the mesh knows it now.
	if code, _, stderr := meshctl(t, "--data", data, "release", archive, "--nodes", "web-3"); code == command.ExitOK || !strings.Contains(stderr, "mesh home has no node web-3") {
		t.Errorf("release to an unknown node: %d\n%s", code, stderr)
	}
	if code != command.ExitOK || !strings.Contains(stdout, "nodes fetch https://releases.example/mesh/") || !strings.Contains(stdout, "web-1 is offline: it will get revision 2") {
		t.Errorf("release --url: %d\n%s", code, stdout)
	}
	for _, args := range [][]string{
		{"release", archive, "--nodes", "Web-1"},
		{"release", archive, "--nodes", "web-1", "--url", "ftp://x"},
		{"release", filepath.Join(dir, "missing.tar.gz"), "--nodes", "web-1"},
		{"release", filepath.Join(data, "control.json"), "--nodes", "web-1"},
	} {
		if code, _, stderr := meshctl(t, append([]string{"--data", data}, args...)...); code != command.ExitRefused {
			t.Errorf("%v: exit %d, want %d: %s", args, code, command.ExitRefused, stderr)
		}
	}
}

// TestServeReleasesOff: --releases-listen off serves nothing and records
// no URL.
func TestServeReleasesOff(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	serve(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--releases-listen", "off")
	if cfg, err := authority.ReadConfig(data); err != nil || cfg.ReleasesURL != "" || len(cfg.URLs) != 1 {
		t.Errorf("control.json %+v, %v", cfg, err)
	}
}

func mustOpen(t *testing.T, data string) *authority.Authority {
	t.Helper()
	a, err := authority.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// desired reads node's stored declaration.
func desired(t *testing.T, nc *nats.Conn, node string) *declaration.Declaration {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), linkproto.DesiredBucket)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), linkproto.DesiredKey("home", node))
	if err != nil {
		t.Fatal(err)
	}
	// The entry is the signed push; the declaration is its document.
	var push linkproto.Declaration
	if err := linkproto.Decode(e.Value(), linkproto.MaxDeclarationSize, &push); err != nil {
		t.Fatal(err)
	}
	if push.Signature == "" || push.Operator == "" {
		t.Errorf("%s's stored declaration is not signed by an operator: %s", node, e.Value())
	}
	d, err := declaration.DecodeStored(push.Document)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestServeReleasesClash: a releases address another process holds is an
// error at start, naming the flag, not a log line that leaves release
// pointing nodes at whatever answers there.
func TestServeReleasesClash(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := filepath.Join(t.TempDir(), "data")
	code, _, stderr := meshctl(t, "--data", data, "serve", "--listen", "127.0.0.1:0", "--mesh", "home", "--releases-listen", ln.Addr().String())
	if code == command.ExitOK || !strings.Contains(stderr, "--releases-listen") || !strings.Contains(stderr, "address already in use") {
		t.Errorf("serve with its releases address taken: exit %d\n%s", code, stderr)
	}
}
