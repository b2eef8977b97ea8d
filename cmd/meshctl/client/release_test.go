package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/declaration/declarationtest"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
)

var hostBuild = []basetest.Entry{{Name: "mesh-host", Mode: 0o755, Body: "#!/bin/sh\necho host\n"}}

func testRelease(n byte) authority.Release {
	return authority.Release{Digest: "sha256:" + strings.Repeat(string("0123456789abcdef"[n%16]), 64), Format: "tar.gz"}
}

func TestWithRelease(t *testing.T) {
	const base = "http://control.example:4280"
	r1, r2 := testRelease(1), testRelease(2)
	src := fmt.Sprintf(`mesh: home
node: a
revision: 7
resources:
  - directory: {path: /srv}
  - archive: {path: "/opt/mesh-host/versions/${version}", source: "%s", digest: "%s", format: tar.gz}
  - file: {path: /etc/motd, content: "hi\n"}
  - archive: {path: "/srv/app-${version}", source: "https://example.com/app.tar.gz", digest: "%s", format: tar.gz}
`, r1.Resource(base).Source, r1.Digest, r2.Digest)
	d, err := declaration.ParseYAML("a.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got, changed, err := withRelease(d, testMesh, "a", r2.Resource(base))
	if err != nil || !changed {
		t.Fatalf("withRelease: %v, changed %v", err, changed)
	}
	if got.Revision != 8 {
		t.Errorf("revision %d, want 8", got.Revision)
	}
	var ids []string
	for _, s := range got.Expanded() {
		ids = append(ids, drivers.ID(s))
	}
	want := []string{"directory:/srv", "archive:/opt/mesh-host/versions/" + r2.Version(), "file:/etc/motd", "archive:/srv/app-" + r2.Version()}
	if strings.Join(ids, " ") != strings.Join(want, " ") {
		t.Errorf("resources %v\nwant %v (the release in the old one's place; other archives kept)", ids, want)
	}
	if a := got.Resources[1].(*drivers.ArchiveSpec); a.Source != base+"/"+r2.Name() || a.Digest != r2.Digest || a.Format != "tar.gz" || a.Path != authority.ReleasePath {
		t.Errorf("release resource %+v", a)
	}
	if d.Revision != 7 || d.Resources[1].(*drivers.ArchiveSpec).Digest != r1.Digest {
		t.Error("withRelease changed the declaration it was given")
	}

	// The same release again changes nothing.
	same, changed, err := withRelease(got, testMesh, "a", r2.Resource(base))
	if err != nil || changed || same.Revision != 8 {
		t.Errorf("the same release again: revision %d, changed %v, %v", same.Revision, changed, err)
	}
	// A node with no declaration gets one with the release alone.
	first, changed, err := withRelease(nil, testMesh, "b", r1.Resource(base))
	if err != nil || !changed || first.Revision != 1 || first.Mesh != testMesh || first.Node != "b" || len(first.Resources) != 1 {
		t.Errorf("first declaration: %+v, changed %v, %v", first, changed, err)
	}
	// What the node would refuse is refused here.
	bad := r1.Resource("ftp://x")
	if _, _, err := withRelease(nil, testMesh, "b", bad); !errors.Is(err, ErrRefused) {
		t.Errorf("a release from ftp://: %v, want ErrRefused", err)
	}
	// A declaration at the limit of resources has no room for a release.
	full := declarationtest.Maximal(testMesh, "a", 1)
	full.Resources[len(full.Resources)-1].(*drivers.FileSpec).Content = "" // room in bytes
	if _, _, err := withRelease(full, testMesh, "a", r1.Resource(base)); !errors.Is(err, ErrRefused) || !errors.Is(err, declaration.ErrLimit) ||
		!strings.Contains(err.Error(), fmt.Sprintf("one resource more than the limit of resources in a declaration: %d", declaration.MaxResources)) {
		t.Errorf("a release added to a full declaration: %.300v", err)
	}
}

// TestRelease: the release is stored in a node's desired state one
// revision later and pushed to the node, which acks it; a node with no
// declaration gets its first; the same release again is pushed again
// without a new revision.
func TestRelease(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	c := b.client(time.Now())
	var mu sync.Mutex
	pushed := map[string][]*linkproto.Declaration{}
	record := func(seq uint64) func(d *linkproto.Declaration) linkproto.Ack {
		return func(d *linkproto.Declaration) linkproto.Ack {
			mu.Lock()
			pushed[d.Node] = append(pushed[d.Node], d)
			mu.Unlock()
			return accept(seq)(d)
		}
	}
	b.fakeNode("a", fakeNode{ack: record(11)})
	b.fakeNode("b", fakeNode{ack: record(21)})
	opt := DeclareOptions{PushTimeout: 5 * time.Second}
	if err := c.Declare(ctx, io.Discard, "a", decl(t, "a", 3, "three\n"), opt); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	r, err := authority.StoreRelease(filepath.Join(dir, "releases"), basetest.Pack(t, dir, "tar.gz", hostBuild))
	if err != nil {
		t.Fatal(err)
	}
	res := r.Resource("http://127.0.0.1:4280")
	for _, tc := range []struct {
		node     string
		revision uint64
		out      string
	}{
		{"a", 4, "a accepted revision 4 (journal #11)\n"},
		{"b", 1, "b accepted revision 1 (journal #21)\n"},
		{"a", 4, "a: revision 4 already delivers this release; pushing it again\na accepted revision 4 (journal #11)\n"},
	} {
		var out bytes.Buffer
		if err := c.Release(ctx, &out, tc.node, res, opt); err != nil {
			t.Fatalf("release to %s: %v", tc.node, err)
		}
		if out.String() != tc.out {
			t.Errorf("release to %s printed %q, want %q", tc.node, out.String(), tc.out)
		}
		stored, err := b.storedPush(ctx, tc.node)
		if err != nil || stored == nil || stored.Revision != tc.revision {
			t.Fatalf("stored for %s: %+v, %v; want revision %d", tc.node, stored, err, tc.revision)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(pushed["a"]) != 3 || len(pushed["b"]) != 1 {
		t.Fatalf("pushes: a %d, b %d; want 3 and 1", len(pushed["a"]), len(pushed["b"]))
	}
	last, err := declaration.ParseJSON("push", pushed["a"][2].Document)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, s := range last.Expanded() {
		ids = append(ids, drivers.ID(s))
	}
	if want := "file:/etc/motd archive:/opt/mesh-host/versions/" + r.Version(); strings.Join(ids, " ") != want {
		t.Errorf("a's pushed resources %v, want %s", ids, want)
	}

	if err := c.Release(ctx, io.Discard, "B", res, opt); !errors.Is(err, ErrRefused) {
		t.Errorf("release to an invalid name: %v, want ErrRefused", err)
	}
}

// TestDocSnippet: the declaration docs/upgrade.md shows parses, and its
// archive is the release a new release replaces.
func TestDocSnippet(t *testing.T) {
	page, err := os.ReadFile("../../../docs/upgrade.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(page), "```yaml\n")
	snippet, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/upgrade.md has no yaml block")
	}
	d, err := declaration.ParseYAML("docs/upgrade.md", []byte(snippet))
	if err != nil {
		t.Fatal(err)
	}
	r := testRelease(3)
	next, changed, err := withRelease(d, d.Mesh, d.Node, r.Resource("http://127.0.0.1:4280"))
	if err != nil || !changed || len(next.Resources) != len(d.Resources) {
		t.Fatalf("a release over the documented one: %+v, changed %v, %v", next, changed, err)
	}
	if got := drivers.ID(next.Expanded()[1]); got != "archive:"+authority.VersionsDir+"/"+r.Version() {
		t.Errorf("the documented release was not replaced: %s", got)
	}
}
