package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// bare parses a declaration that leaves its revision out.
func bare(t *testing.T, node, motd string) *declaration.Declaration {
	t.Helper()
	src := fmt.Sprintf("mesh: %s\nnode: %s\nresources:\n  - file: {path: /etc/motd, content: %q}\n", testMesh, node, motd)
	d, err := declaration.ParseYAML(node+".yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDeclareNumbersARevisionLeftOut is the operator's story: a file
// without a revision is declared, a release numbers the next one, and the
// same file is declared again without editing a number, keeping the
// release the mesh delivered; the same content is not a new revision, and
// a stated older revision is still refused, saying it may be left out.
func TestDeclareNumbersARevisionLeftOut(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	c := b.client(time.Now())
	opt := DeclareOptions{PushTimeout: 100 * time.Millisecond}
	dir := t.TempDir()
	rel, err := authority.StoreRelease(filepath.Join(dir, "releases"), basetest.Pack(t, dir, "tar.gz", hostBuild))
	if err != nil {
		t.Fatal(err)
	}
	res := rel.Resource("http://127.0.0.1:4280")
	offline := func(rev uint64) string {
		return fmt.Sprintf("a is offline: it will get revision %d when it reconnects\n", rev)
	}
	kept := "a: kept host release " + short(rel.Version()) + " that the mesh delivered (the file names none; `meshctl release` changes it)\n"

	for _, step := range []struct {
		name    string
		do      func(out io.Writer) error
		out     string
		stored  uint64
		release bool
	}{
		{"first, numbered 1", func(out io.Writer) error { return c.Declare(ctx, out, "a", bare(t, "a", "one\n"), opt) },
			"a: revision 1 assigned (none stored)\n" + offline(1), 1, false},
		{"the same again: not bumped", func(out io.Writer) error { return c.Declare(ctx, out, "a", bare(t, "a", "one\n"), opt) },
			"a: revision 1 is stored with the same content: nothing new\n" + offline(1), 1, false},
		{"a release numbers 2", func(out io.Writer) error { return c.Release(ctx, out, "a", res, opt) },
			offline(2), 2, true},
		{"the file again: the release kept, nothing new", func(out io.Writer) error { return c.Declare(ctx, out, "a", bare(t, "a", "one\n"), opt) },
			kept + "a: revision 2 is stored with the same content: nothing new\n" + offline(2), 2, true},
		{"the file edited: numbered 3, the release kept", func(out io.Writer) error { return c.Declare(ctx, out, "a", bare(t, "a", "two\n"), opt) },
			kept + "a: revision 3 assigned (stored was 2)\n" + offline(3), 3, true},
	} {
		var out bytes.Buffer
		if err := step.do(&out); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if out.String() != step.out {
			t.Errorf("%s: printed %q\nwant %q", step.name, out.String(), step.out)
		}
		stored, err := c.storedFor(ctx, "a")
		if err != nil || stored == nil || stored.Revision != step.stored {
			t.Fatalf("%s: stored %+v, %v; want revision %d", step.name, stored, err, step.stored)
		}
		if got := slices.ContainsFunc(stored.Resources, isRelease); got != step.release {
			t.Errorf("%s: stored delivers a release: %v, want %v", step.name, got, step.release)
		}
	}

	// A stated revision is checked as before, and the refusal says it may
	// be left out.
	var out bytes.Buffer
	err = c.Declare(ctx, &out, "a", decl(t, "a", 2, "two\n"), opt)
	want := "declaration refused: a is at revision 3; revision 2 is older (or leave `revision` out of the file, and the mesh numbers it after the stored one)"
	if !errors.Is(err, ErrRefused) || err.Error() != want || out.Len() != 0 {
		t.Errorf("a stated older revision: got %v, printed %q\nwant %s, nothing printed", err, out.String(), want)
	}

	// Numbered over a read another operator's store has overtaken, the
	// store is refused: two cannot both take revision 4.
	read, err := c.readStored(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Declare(ctx, io.Discard, "a", bare(t, "a", "three\n"), opt); err != nil {
		t.Fatal(err)
	}
	d, _, err := numbered("a", bare(t, "a", "four\n"), read)
	if err != nil || d.Revision != 4 {
		t.Fatalf("numbered over the stale read: %+v, %v; want revision 4", d, err)
	}
	if _, err := c.prepareOver(ctx, "a", d, read); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "declared by someone else meanwhile") {
		t.Errorf("stored over a stale read: %v, want a refusal", err)
	}
	if stored, _ := c.storedFor(ctx, "a"); stored.Revision != 4 || !strings.Contains(fmt.Sprint(stored.Resources[0]), "three") {
		t.Errorf("stored %+v, want the other operator's revision 4", stored)
	}
}
