package archive_test

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/archive"
)

// fuzzLimits keep each input's unpacking small.
var fuzzLimits = archive.Options{MaxBytes: 64 << 10, MaxEntries: 64}

// FuzzApplyArchive applies archives an attacker made, over a version
// already in place. Whatever the bytes, Apply either lays down a tree of
// directories and regular files beneath the destination (no link, device
// or special bit, nothing group- or other-writable, within the limits), or
// refuses and leaves the root as it was: the previous version in place,
// nothing staged left behind, nothing else touched.
func FuzzApplyArchive(f *testing.F) {
	seeds := [][]ent{
		{file("version.txt", "v2\n"), {name: "bin/", typ: tar.TypeDir, mode: 0o755}, {name: "bin/app", body: "#!/bin/sh\n", mode: 0o755}},
		{{name: "open/", typ: tar.TypeDir, mode: 0o777}, {name: "open/all", body: "x", mode: 0o666}},
		{file("../evil", "x")},
		{file("a/b", "x"), file("a/../../evil", "x")},
		{file("/etc/passwd", "x")},
		{{name: "etc", typ: tar.TypeSymlink, link: "/etc"}, file("etc/passwd", "x")},
		{file("a", "x"), {name: "h", typ: tar.TypeLink, link: "/etc/shadow"}},
		{{name: "su", body: "x", mode: 0o4755}},
		{file("a", "x"), file("a/b", "y")},
		{file("a", "x"), file("./a", "y")},
		{file("./"+archive.DigestFile, "sha256:forged")},
		{{name: "pipe", typ: tar.TypeFifo, mode: 0o644}},
	}
	for _, s := range seeds {
		f.Add(false, tarOf(f, s...))
		f.Add(true, zipOf(f, s...))
	}
	// Each apply flushes the filesystem it unpacks on (syncfs): on the
	// disk of a machine that has just built the tests, the first flush
	// waited 15 s of a fuzzing run on what the build wrote. On tmpfs,
	// where there is one, it costs nothing.
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	f.Fuzz(func(t *testing.T, zipped bool, data []byte) {
		dir, err := os.MkdirTemp(base, "fuzz-archive-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		e := newEnvAt(t, dir, fuzzLimits)
		old := e.spec("/srv/app", drivers.FormatTar, tarOf(t, file("version.txt", "v1\n")))
		e.apply(old, drivers.Created)
		format := drivers.FormatTar
		if zipped {
			format = drivers.FormatZip
		}
		spec := e.spec("/srv/app", format, data)
		// What the root holds besides the destination must not change,
		// whatever comes of the apply.
		beforeApp, beforeVar := e.tree("/srv/app"), e.tree("/var")
		defer func() {
			e.noLeftovers("/", "srv", "var")
			e.noLeftovers("/srv", "app")
			if after := e.tree("/var"); after != beforeVar {
				t.Errorf("applying the archive changed /var, outside its destination:\n got: %s\nwant: %s", after, beforeVar)
			}
		}()

		if _, err := e.d.Apply(t.Context(), spec); err != nil {
			if after := e.tree("/srv/app"); after != beforeApp {
				t.Errorf("a refused archive (%v) changed the destination:\n got: %s\nwant: %s", err, after, beforeApp)
			}
			return
		}
		// Applied: only directories and regular files, no special bits,
		// no group or other write, within the byte limit.
		var bytes int64
		err = filepath.WalkDir(e.root.Host("/srv/app"), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			m := fi.Mode()
			switch {
			case !m.IsDir() && !m.IsRegular():
				t.Errorf("%s: a %v was laid down", p, m.Type())
			case m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0:
				t.Errorf("%s: mode %v has a special bit", p, m)
			case m.Perm()&0o022 != 0:
				t.Errorf("%s: mode %v is writable by group or other", p, m)
			}
			if m.IsRegular() {
				bytes += fi.Size()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if bytes > fuzzLimits.MaxBytes+int64(len(spec.Digest))+1 { // the digest file beside the entries
			t.Errorf("%d bytes laid down, over the limit of %d", bytes, fuzzLimits.MaxBytes)
		}
	})
}
