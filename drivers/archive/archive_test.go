package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/klauspost/compress/zstd"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/archive"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
)

func TestConformance(t *testing.T) {
	driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
		e := newEnv(t, archive.Options{})
		a := e.spec("/srv/a", drivers.FormatTarGz, tgzOf(t, file("hello.txt", "a\n"), file("sub/b.txt", "b\n")))
		b := e.spec("/srv/b", drivers.FormatTarGz, tgzOf(t, ent{name: "bin/", typ: tar.TypeDir, mode: 0o755}, ent{name: "bin/tool", body: "#!/bin/sh\n", mode: 0o755}))
		changed := e.spec("/changed", drivers.FormatTarGz, tgzOf(t, file("hello.txt", "changed\n")))
		return driverstest.Fixture{
			Driver: e.d,
			Specs:  []drivers.Spec{a, b},
			Changed: func(s drivers.Spec) drivers.Spec {
				c := *s.(*drivers.ArchiveSpec)
				c.Source, c.Digest = changed.Source, changed.Digest
				return &c
			},
			Snapshot: func(t *testing.T) string { return driverstest.Tree(t, e.rootDir) },
		}
	})
}

// srcTree lays down a tree for the real tools to pack.
func srcTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := []struct {
		name string
		body string
		mode fs.FileMode
	}{
		{"bin/app", "#!/bin/sh\necho app\n", 0o755},
		{"etc/app.conf", "answer = 42\n", 0o644},
		{"deep/a/b/c.txt", strings.Repeat("deep ", 1000), 0o600},
		{"readme with spaces.txt", "hello\n", 0o444},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "deep"), 0o750); err != nil {
		t.Fatal(err)
	}
	return dir
}

// run runs a real tool in dir.
func run(t *testing.T, dir, name string, args ...string) error {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// TestRealTools unpacks archives made by GNU tar and zip (or Python's
// zipfile) and compares the result with the tree they were made from.
func TestRealTools(t *testing.T) {
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("tar is not installed")
	}
	src := srcTree(t)
	want := driverstest.Tree(t, src)
	cases := []struct {
		format string
		make   func(t *testing.T, out string)
	}{
		{drivers.FormatTar, func(t *testing.T, out string) {
			if err := run(t, src, "tar", "-cf", out, "."); err != nil {
				t.Fatal(err)
			}
		}},
		{drivers.FormatTarGz, func(t *testing.T, out string) {
			if err := run(t, src, "tar", "-czf", out, "."); err != nil {
				t.Fatal(err)
			}
		}},
		{drivers.FormatTarZst, func(t *testing.T, out string) {
			if err := run(t, src, "tar", "--zstd", "-cf", out, "."); err != nil {
				t.Skipf("tar --zstd does not work here, so tar.zst is not tested against the real tool: %v", err)
			}
		}},
		{drivers.FormatZip, func(t *testing.T, out string) {
			if _, err := exec.LookPath("zip"); err == nil {
				if err := run(t, src, "zip", "-r", "-q", out, "."); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err := run(t, src, "python3", "-m", "zipfile", "-c", out, "bin", "etc", "deep", "empty", "readme with spaces.txt"); err != nil {
				t.Skipf("neither zip nor python3 -m zipfile works here: %v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.format, func(t *testing.T) {
			e := newEnv(t, archive.Options{})
			out := filepath.Join(e.src, "out."+c.format)
			c.make(t, out)
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			s := &drivers.ArchiveSpec{Path: "/srv/app", Source: e.fileURL(out), Digest: sum(data), Format: c.format}
			e.apply(s, drivers.Created)
			if obs := e.observe(s); !obs.InSync || obs.Seen != s.Digest {
				t.Errorf("Observe after Apply = %+v, want InSync, Seen %s", obs, s.Digest)
			}
			if err := os.Remove(e.root.Host("/srv/app/" + archive.DigestFile)); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(e.root.Host("/srv/app/" + archive.ArrivedFile)); err != nil {
				t.Fatal(err)
			}
			// The destination directory's own mode is the driver's.
			got := strings.Replace(e.tree("/srv/app"), ". 0755 ", ". "+modeOf(t, src)+" ", 1)
			if got != want {
				t.Errorf("unpacked tree:\n%s\nwant (the tree %s packed):\n%s", got, c.format, want)
			}
			e.noLeftovers("/srv", "app")
		})
	}
}

func modeOf(t *testing.T, p string) string {
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%04o", fi.Mode().Perm())
}

// TestRefused checks each archive the driver refuses: the error says why
// and names the entry, the previous version stays byte for byte, and
// nothing is left beside it.
func TestRefused(t *testing.T) {
	v1 := func(t *testing.T) []byte {
		return tgzOf(t, file("version.txt", "v1\n"), ent{name: "bin/app", body: "#!/bin/sh\n", mode: 0o755})
	}
	realTarSymlink := func(t *testing.T) []byte {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "ok.txt"), []byte("ok"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out.tgz")
		if err := run(t, dir, "tar", "-czf", out, "."); err != nil {
			t.Skip(err)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	corrupt := func(t *testing.T) []byte {
		b := tgzOf(t, file("a.txt", strings.Repeat("the quick brown fox jumps over the lazy dog\n", 500)), file("b.txt", "b"))
		b = append([]byte(nil), b...)
		for i := len(b) / 2; i < len(b)/2+16; i++ {
			b[i] ^= 0xff
		}
		return b
	}
	big := strings.Repeat("x", 2000)
	cases := []struct {
		name   string
		opts   archive.Options
		format string
		data   func(t *testing.T) []byte
		digest string // "" is the data's own
		is     error
		want   []string
	}{
		{name: "absolute", data: func(t *testing.T) []byte { return tgzOf(t, file("ok", "ok"), file("/etc/passwd", "x")) },
			is: archive.ErrUnsafeEntry, want: []string{`"/etc/passwd"`, "absolute names are refused"}},
		{name: "dotdot", data: func(t *testing.T) []byte { return tgzOf(t, file("../evil", "x")) },
			is: archive.ErrUnsafeEntry, want: []string{`"../evil"`, `".." component`}},
		{name: "dotdot inside", data: func(t *testing.T) []byte { return tgzOf(t, file("a/b", "x"), file("a/../../evil", "x")) },
			is: archive.ErrUnsafeEntry, want: []string{`"a/../../evil"`, `".." component`}},
		{name: "backslash", data: func(t *testing.T) []byte { return tgzOf(t, file(`..\..\evil`, "x")) },
			is: archive.ErrUnsafeEntry, want: []string{`backslash`}},
		{name: "symlink", data: func(t *testing.T) []byte {
			return tgzOf(t, ent{name: "etc", typ: tar.TypeSymlink, link: "/etc"}, file("etc/passwd", "x"))
		}, is: archive.ErrUnsafeEntry, want: []string{`"etc"`, "symlinks are refused"}},
		{name: "symlink by real tar", data: realTarSymlink,
			is: archive.ErrUnsafeEntry, want: []string{`"./passwd"`, "symlinks are refused"}},
		{name: "hardlink", data: func(t *testing.T) []byte {
			return tgzOf(t, file("a", "x"), ent{name: "h", typ: tar.TypeLink, link: "/etc/shadow"})
		}, is: archive.ErrUnsafeEntry, want: []string{`"h"`, "hard links are refused"}},
		{name: "char device", data: func(t *testing.T) []byte { return tgzOf(t, ent{name: "null", typ: tar.TypeChar, mode: 0o666}) },
			is: archive.ErrUnsafeEntry, want: []string{`"null"`, "character devices are refused"}},
		{name: "block device", data: func(t *testing.T) []byte { return tgzOf(t, ent{name: "sda", typ: tar.TypeBlock, mode: 0o660}) },
			is: archive.ErrUnsafeEntry, want: []string{`"sda"`, "block devices are refused"}},
		{name: "fifo", data: func(t *testing.T) []byte { return tgzOf(t, ent{name: "pipe", typ: tar.TypeFifo, mode: 0o644}) },
			is: archive.ErrUnsafeEntry, want: []string{`"pipe"`, "fifos are refused"}},
		{name: "setuid", data: func(t *testing.T) []byte { return tgzOf(t, ent{name: "bin/su", body: "x", mode: 0o4755}) },
			is: archive.ErrUnsafeEntry, want: []string{`"bin/su"`, "setuid and setgid bits are refused (mode 4755)"}},
		{name: "setgid directory", data: func(t *testing.T) []byte { return tgzOf(t, ent{name: "shared/", typ: tar.TypeDir, mode: 0o2775}) },
			is: archive.ErrUnsafeEntry, want: []string{`"shared/"`, "(mode 2775)"}},
		{name: "reserved name", data: func(t *testing.T) []byte { return tgzOf(t, file("./"+archive.DigestFile, "sha256:forged")) },
			is: archive.ErrUnsafeEntry, want: []string{archive.DigestFile, "the driver's own"}},
		{name: "file as parent", data: func(t *testing.T) []byte { return tgzOf(t, file("a", "x"), file("a/b", "y")) },
			is: archive.ErrUnsafeEntry, want: []string{`"a/b"`, `parent "a" is not a directory`}},
		{name: "duplicate", data: func(t *testing.T) []byte { return tgzOf(t, file("a", "x"), file("./a", "y")) },
			is: archive.ErrUnsafeEntry, want: []string{`"./a"`, "a second entry of the same name"}},
		{name: "zip dotdot", format: drivers.FormatZip, data: func(t *testing.T) []byte { return zipOf(t, file("../../evil", "x")) },
			is: archive.ErrUnsafeEntry, want: []string{`"../../evil"`, `".." component`}},
		{name: "zip absolute", format: drivers.FormatZip, data: func(t *testing.T) []byte { return zipOf(t, file("/abs", "x")) },
			is: archive.ErrUnsafeEntry, want: []string{`"/abs"`, "absolute"}},
		{name: "zip symlink", format: drivers.FormatZip, data: func(t *testing.T) []byte {
			return zipOf(t, ent{name: "link", typ: tar.TypeSymlink, link: "/etc", mode: 0o777})
		}, is: archive.ErrUnsafeEntry, want: []string{`"link"`, "symlinks are refused"}},
		{name: "zip fifo", format: drivers.FormatZip, data: func(t *testing.T) []byte { return zipOf(t, ent{name: "p", typ: tar.TypeFifo, mode: 0o644}) },
			is: archive.ErrUnsafeEntry, want: []string{`"p"`, "fifos are refused"}},
		{name: "zip setuid", format: drivers.FormatZip, data: func(t *testing.T) []byte { return zipOf(t, ent{name: "su", body: "x", mode: 0o4755}) },
			is: archive.ErrUnsafeEntry, want: []string{`"su"`, "setuid and setgid bits are refused (mode 4755)"}},
		{name: "too big", opts: archive.Options{MaxBytes: 1000},
			data: func(t *testing.T) []byte { return tgzOf(t, file("ok", "ok"), file("big", big)) },
			is:   archive.ErrLimit, want: []string{`entry "big"`, "more than 1000 bytes (Options.MaxBytes)"}},
		{name: "too big in sum", opts: archive.Options{MaxBytes: 1000},
			data: func(t *testing.T) []byte { return tgzOf(t, file("a", big[:600]), file("b", big[:600])) },
			is:   archive.ErrLimit, want: []string{`entry "b"`, "more than 1000 bytes"}},
		{name: "zip too big", format: drivers.FormatZip, opts: archive.Options{MaxBytes: 1000},
			data: func(t *testing.T) []byte { return zipOf(t, file("big", big)) },
			is:   archive.ErrLimit, want: []string{`entry "big"`, "more than 1000 bytes"}},
		{name: "too many entries", opts: archive.Options{MaxEntries: 3},
			data: func(t *testing.T) []byte {
				return tgzOf(t, file("f0", "0"), file("f1", "1"), file("f2", "2"), file("f3", "3"), file("f4", "4"))
			},
			is: archive.ErrLimit, want: []string{`entry "f3"`, "more than 3 entries (Options.MaxEntries)"}},
		{name: "digest mismatch", data: func(t *testing.T) []byte { return tgzOf(t, file("a", "x")) },
			digest: sum([]byte("something else")),
			is:     archive.ErrDigestMismatch, want: []string{"want " + sum([]byte("something else")), "the content fetched is not that"}},
		{name: "corrupt gzip", data: corrupt, is: archive.ErrCorrupt, want: []string{"corrupt archive: "}},
		{name: "truncated gzip", data: func(t *testing.T) []byte { b := corrupt(t); return tgzOf(t, file("a", string(b)))[:200] },
			is: archive.ErrCorrupt, want: []string{"unexpected EOF"}},
		{name: "not gzip", data: func(t *testing.T) []byte { return tarOf(t, file("a", "x")) },
			is: archive.ErrCorrupt, want: []string{"gzip: invalid header"}},
		{name: "not zip", format: drivers.FormatZip, data: func(t *testing.T) []byte { return tarOf(t, file("a", "x")) },
			is: archive.ErrCorrupt, want: []string{"zip: not a valid zip file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.opts)
			old := e.spec("/srv/app", drivers.FormatTarGz, v1(t))
			e.apply(old, drivers.Created)
			before := e.tree("/srv/app")

			format := c.format
			if format == "" {
				format = drivers.FormatTarGz
			}
			bad := e.spec("/srv/app", format, c.data(t))
			if c.digest != "" {
				bad.Digest = c.digest
			}
			_, err := e.d.Apply(t.Context(), bad)
			t.Logf("Apply: %v", err)
			wantErr(t, err, c.is, c.want...)
			// The digest of what was fetched is never said: a source
			// naming any file would make the error, journaled and sent
			// upward, an oracle for that file's digest.
			if fetched, rerr := os.ReadFile(e.sourcePath(bad)); rerr != nil {
				t.Fatal(rerr)
			} else if hexOnly := strings.TrimPrefix(sum(fetched), "sha256:"); bad.Digest != sum(fetched) && strings.Contains(err.Error(), hexOnly) {
				t.Errorf("the error %q reveals the digest of what was fetched", err)
			}

			if after := e.tree("/srv/app"); after != before {
				t.Errorf("the refused archive changed the destination:\n got: %s\nwant: %s", after, before)
			}
			e.noLeftovers("/srv", "app")
			if obs := e.observe(old); !obs.InSync {
				t.Errorf("Observe(previous version) = %+v, want InSync", obs)
			}
		})
	}
}

// TestInvalidSpec: specs the driver cannot apply are refused before
// anything is fetched.
func TestInvalidSpec(t *testing.T) {
	e := newEnv(t, archive.Options{})
	good := e.spec("/srv/app", drivers.FormatTar, tarOf(t, file("a", "x")))
	cases := []struct {
		name   string
		modify func(s *drivers.ArchiveSpec)
		is     error
	}{
		{"relative path", func(s *drivers.ArchiveSpec) { s.Path = "srv/app" }, drivers.ErrUnsafePath},
		{"dotdot path", func(s *drivers.ArchiveSpec) { s.Path = "/srv/../app" }, drivers.ErrUnsafePath},
		{"no digest", func(s *drivers.ArchiveSpec) { s.Digest = "" }, drivers.ErrInvalidSpec},
		{"md5 digest", func(s *drivers.ArchiveSpec) { s.Digest = "md5:d41d8cd98f00b204e9800998ecf8427e" }, drivers.ErrInvalidSpec},
		{"format", func(s *drivers.ArchiveSpec) { s.Format = "rar" }, drivers.ErrInvalidSpec},
		{"ftp source", func(s *drivers.ArchiveSpec) { s.Source = "ftp://example.org/a.tar" }, drivers.ErrInvalidSpec},
		{"remote file source", func(s *drivers.ArchiveSpec) { s.Source = "file://otherhost/a.tar" }, drivers.ErrInvalidSpec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := *good
			c.modify(&s)
			_, err := e.d.Apply(t.Context(), &s)
			wantErr(t, err, c.is)
			_, err = e.d.Observe(t.Context(), &s)
			wantErr(t, err, c.is)
			e.noLeftovers("/srv")
		})
	}
}

func TestNoParent(t *testing.T) {
	e := newEnv(t, archive.Options{})
	s := e.spec("/opt/app/1.0", drivers.FormatTar, tarOf(t, file("a", "x")))
	_, err := e.d.Apply(t.Context(), s)
	wantErr(t, err, archive.ErrNoParent, "/opt/app/1.0")
	if obs := e.observe(s); obs.Exists || obs.Differs[0] != "absent" {
		t.Errorf("Observe under a missing parent = %+v, want absent", obs)
	}
	if err := e.d.Remove(t.Context(), s); err != nil {
		t.Errorf("Remove under a missing parent: %v", err)
	}
}

func TestUpdateReplacesWholeTree(t *testing.T) {
	e := newEnv(t, archive.Options{})
	v1 := e.spec("/srv/app", drivers.FormatTarGz, tgzOf(t, file("version.txt", "v1\n"), file("only-in-v1", "x")))
	v2 := e.spec("/srv/app", drivers.FormatZip, zipOf(t, file("version.txt", "v2\n"), file("lib/only-in-v2", "y")))
	e.apply(v1, drivers.Created)
	obs := e.observe(v2)
	if !obs.Exists || obs.InSync || strings.Join(obs.Differs, ",") != "content" || obs.Seen != v1.Digest {
		t.Errorf("Observe(v2) with v1 in place = %+v, want Differs [content], Seen %s", obs, v1.Digest)
	}
	e.apply(v2, drivers.Updated)
	if got := e.read("/srv/app/version.txt"); got != "v2\n" {
		t.Errorf("version.txt = %q, want v2", got)
	}
	if _, err := os.Lstat(e.root.Host("/srv/app/only-in-v1")); !os.IsNotExist(err) {
		t.Errorf("only-in-v1 after the update: %v, want it gone with the old tree", err)
	}
	e.apply(v2, drivers.Unchanged)
	e.noLeftovers("/srv", "app")
}

// TestUpdateIsAtomic reads the destination while it is replaced again and
// again: a reader sees one version or the other, never nothing.
func TestUpdateIsAtomic(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("elsewhere the old tree is renamed aside first, and there is a moment with nothing in place")
	}
	e := newEnv(t, archive.Options{})
	specs := []*drivers.ArchiveSpec{
		e.spec("/srv/app", drivers.FormatTarGz, tgzOf(t, file("version.txt", "v1"))),
		e.spec("/srv/app", drivers.FormatTarGz, tgzOf(t, file("version.txt", "v2"))),
	}
	e.apply(specs[0], drivers.Created)
	stop := make(chan struct{})
	failed := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(e.root.Host("/srv/app/version.txt"))
			if err != nil || (string(b) != "v1" && string(b) != "v2") {
				failed <- fmt.Sprintf("a reader saw %q, %v", b, err)
				return
			}
		}
	}()
	for i := 1; i <= 20; i++ {
		e.apply(specs[i%2], drivers.Updated)
	}
	close(stop)
	<-done
	select {
	case msg := <-failed:
		t.Error(msg)
	default:
	}
	e.noLeftovers("/srv", "app")
}

func TestObserve(t *testing.T) {
	e := newEnv(t, archive.Options{})
	data := tgzOf(t, file("a", "x"))
	s := e.spec("/srv/app", drivers.FormatTarGz, data)

	// A symlink to a directory that looks in sync is a "type" difference,
	// never followed.
	decoy := filepath.Join(t.TempDir(), "decoy")
	if err := os.MkdirAll(decoy, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{archive.DigestFile: s.Digest + "\n", archive.ArrivedFile: "2025-01-01T00:00:00.000000000Z 1\n"} {
		if err := os.WriteFile(filepath.Join(decoy, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(decoy, e.root.Host("/srv/app")); err != nil {
		t.Fatal(err)
	}
	obs := e.observe(s)
	if !obs.Exists || obs.InSync || strings.Join(obs.Differs, ",") != "type" || !strings.Contains(obs.Note, "symlink") {
		t.Errorf("Observe with a symlink at the destination = %+v, want Differs [type] and a note naming the symlink", obs)
	}
	e.apply(s, drivers.Updated)
	if fi, err := os.Lstat(e.root.Host("/srv/app")); err != nil || !fi.IsDir() {
		t.Errorf("after Apply over a symlink: %v, %v; want a directory in its place", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(decoy, "a")); !os.IsNotExist(err) {
		t.Errorf("Apply unpacked into the symlink's target: %v", err)
	}

	// A regular file.
	if err := e.d.Remove(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.root.Host("/srv/app"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if obs := e.observe(s); strings.Join(obs.Differs, ",") != "type" || !strings.Contains(obs.Note, "regular file") {
		t.Errorf("Observe with a file at the destination = %+v, want Differs [type]", obs)
	}
	if err := os.Remove(e.root.Host("/srv/app")); err != nil {
		t.Fatal(err)
	}

	// A directory the driver did not unpack.
	if err := os.Mkdir(e.root.Host("/srv/app"), 0o755); err != nil {
		t.Fatal(err)
	}
	if obs := e.observe(s); strings.Join(obs.Differs, ",") != "content" || obs.Seen != "" || !obs.Exists {
		t.Errorf("Observe of a foreign directory = %+v, want Differs [content], Seen empty", obs)
	}
	e.apply(s, drivers.Updated)

	// Without its arrival marker, Apply writes the marker and fetches
	// nothing: the source is gone.
	if err := os.Remove(e.root.Host("/srv/app/" + archive.ArrivedFile)); err != nil {
		t.Fatal(err)
	}
	if obs := e.observe(s); strings.Join(obs.Differs, ",") != "arrival" || obs.Seen != s.Digest {
		t.Errorf("Observe without the arrival marker = %+v, want Differs [arrival]", obs)
	}
	if err := os.Remove(e.sourcePath(s)); err != nil {
		t.Fatal(err)
	}
	e.apply(s, drivers.Updated)
	if obs := e.observe(s); !obs.InSync {
		t.Errorf("Observe after the marker was rewritten = %+v, want InSync", obs)
	}
}

// TestSourceThatIsNotAFileIsRefusedAtOnce: a FIFO (or a device) at a
// file source's path is refused without waiting on it: an open that
// blocked for a writer hung an apply, deaf to SIGTERM.
func TestSourceThatIsNotAFileIsRefusedAtOnce(t *testing.T) {
	e := newEnv(t, archive.Options{})
	s := e.spec("/srv/app", drivers.FormatTarGz, tgzOf(t, file("a", "x")))
	fifo := filepath.Join(e.src, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	s.Source = e.fileURL(fifo)
	done := make(chan error, 1)
	go func() {
		_, err := e.d.Apply(t.Context(), s)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Apply from a FIFO = %v, want refused as not a regular file", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Apply from a FIFO is still waiting after 10 s")
	}
}

// TestRemoveNeverFollows plants symlinks inside the tree pointing out of
// it; Remove unlinks them and leaves their targets alone.
func TestRemoveNeverFollows(t *testing.T) {
	e := newEnv(t, archive.Options{})
	s := e.spec("/srv/app", drivers.FormatTarGz, tgzOf(t, file("sub/a", "x"), ent{name: "ro/", typ: tar.TypeDir, mode: 0o555}, file("ro2/f", "y")))
	e.apply(s, drivers.Created)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "precious"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"/srv/app/escape", "/srv/app/sub/escape"} {
		if err := os.Symlink(outside, e.root.Host(l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(e.root.Host("/srv/app/ro2"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Remove(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "precious")); err != nil || string(b) != "keep" {
		t.Errorf("the symlink's target after Remove: %q, %v", b, err)
	}
	e.noLeftovers("/srv")
	if obs := e.observe(s); obs.Exists {
		t.Errorf("Observe after Remove = %+v, want absent", obs)
	}

	// A symlink at the destination is unlinked, its target left.
	if err := os.Symlink(outside, e.root.Host("/srv/app")); err != nil {
		t.Fatal(err)
	}
	if err := e.d.Remove(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "precious")); err != nil {
		t.Errorf("the symlink's target after Remove: %v", err)
	}
	e.noLeftovers("/srv")
}

// TestRemoveByKey: Remove reads only the path, which is all
// drivers.SpecForRemoval gives it when a declaration stops naming an
// archive.
func TestRemoveByKey(t *testing.T) {
	e := newEnv(t, archive.Options{})
	s := e.spec("/srv/app", drivers.FormatTarGz, tgzOf(t, file("a", "x")))
	e.apply(s, drivers.Created)
	spec, err := drivers.SpecForRemoval(drivers.ID(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.d.Remove(t.Context(), spec); err != nil {
		t.Fatalf("Remove by key: %v", err)
	}
	if obs := e.observe(s); obs.Exists {
		t.Errorf("Observe after Remove = %+v, want absent", obs)
	}
}

// TestLeftoversSwept: staging directories of a process that died are
// removed by the next Apply; look-alike names of others are not.
func TestLeftoversSwept(t *testing.T) {
	e := newEnv(t, archive.Options{})
	for _, d := range []string{".app.mesh-host-stage-0123456789ab/x/y", ".app.mesh-host-old-abcdefabcdef", ".app.mesh-host-notours", ".other.mesh-host-stage-0123456789ab"} {
		if err := os.MkdirAll(e.root.Host("/srv/"+d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.root.Host("/srv/.app.mesh-host-fetch-000000000000"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.apply(e.spec("/srv/app", drivers.FormatTar, tarOf(t, file("a", "x"))), drivers.Created)
	e.noLeftovers("/srv", "app", ".app.mesh-host-notours", ".other.mesh-host-stage-0123456789ab")
}

var arrivedLine = regexp.MustCompile(`^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (\d+)\n$`)

// arrived parses a version directory's arrival marker.
func (e *env) arrived(p string) (time.Time, int) {
	e.t.Helper()
	m := arrivedLine.FindStringSubmatch(e.read(p + "/" + archive.ArrivedFile))
	if m == nil {
		e.t.Fatalf("%s/%s = %q, want RFC 3339 nanoseconds UTC, a space, a counter", p, archive.ArrivedFile, e.read(p+"/"+archive.ArrivedFile))
	}
	at, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		e.t.Fatal(err)
	}
	n, err := strconv.Atoi(m[2])
	if err != nil {
		e.t.Fatal(err)
	}
	return at, n
}

// TestArrival: the counter orders arrivals within a parent even when the
// clock steps back.
func TestArrival(t *testing.T) {
	clock := []time.Time{
		time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600)),
		time.Date(2026, 2, 1, 12, 0, 0, 0, time.UTC), // stepped back
		time.Date(2026, 3, 2, 12, 0, 0, 5, time.UTC),
	}
	next := 0
	e := newEnv(t, archive.Options{Now: func() time.Time { next++; return clock[next-1] }})
	if err := os.Mkdir(e.root.Host("/srv/versions"), 0o755); err != nil {
		t.Fatal(err)
	}
	v1 := e.spec("/srv/versions/1.0", drivers.FormatTarGz, tgzOf(t, file("v", "1")))
	v2 := e.spec("/srv/versions/2.0", drivers.FormatTarGz, tgzOf(t, file("v", "2")))
	e.apply(v1, drivers.Created)
	e.apply(v2, drivers.Created)
	at1, n1 := e.arrived("/srv/versions/1.0")
	at2, n2 := e.arrived("/srv/versions/2.0")
	if !at1.Equal(clock[0]) || at1.Location() != time.UTC || !at2.Equal(clock[1]) {
		t.Errorf("arrival times %v and %v, want %v and %v in UTC", at1, at2, clock[0], clock[1])
	}
	if n1 != 1 || n2 != 2 {
		t.Errorf("counters %d and %d, want 1 and 2", n1, n2)
	}
	e.apply(v2, drivers.Unchanged)
	if _, n := e.arrived("/srv/versions/2.0"); n != 2 {
		t.Errorf("an Unchanged Apply moved the counter to %d", n)
	}
	// 1.0 arrives anew: it is now the newest.
	v1b := e.spec("/srv/versions/1.0", drivers.FormatTarGz, tgzOf(t, file("v", "1b")))
	e.apply(v1b, drivers.Updated)
	if _, n := e.arrived("/srv/versions/1.0"); n != 3 {
		t.Errorf("counter of the re-arrived 1.0 = %d, want 3", n)
	}
}

func TestHTTPSource(t *testing.T) {
	data := tgzOf(t, file("served.txt", "over http\n"))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/app.tar.gz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, archive.Options{HTTPClient: srv.Client()})
	s := &drivers.ArchiveSpec{Path: "/srv/app", Source: srv.URL + "/app.tar.gz", Digest: sum(data), Format: drivers.FormatTarGz}
	e.apply(s, drivers.Created)
	if got := e.read("/srv/app/served.txt"); got != "over http\n" {
		t.Errorf("served.txt = %q", got)
	}
	before := e.tree("/srv/app")

	missing := *s
	missing.Source = srv.URL + "/missing.tar.gz"
	missing.Digest = sum([]byte("other"))
	_, err := e.d.Apply(t.Context(), &missing)
	wantErr(t, err, nil, "404")
	if after := e.tree("/srv/app"); after != before {
		t.Errorf("a failed fetch changed the destination:\n got: %s\nwant: %s", after, before)
	}
	e.noLeftovers("/srv", "app")
}

// TestCancelMidDownload cancels while the server is part way through the
// archive: Apply returns promptly with context.Canceled and leaves the
// previous version and nothing else.
func TestCancelMidDownload(t *testing.T) {
	data := tgzOf(t, file("big", strings.Repeat("0123456789abcdef", 1<<16)))
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		_, _ = w.Write(data[:len(data)/4])
		w.(http.Flusher).Flush()
		close(started)
		<-r.Context().Done() // the rest never comes
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, archive.Options{HTTPClient: srv.Client()})
	old := e.spec("/srv/app", drivers.FormatTar, tarOf(t, file("version.txt", "v1")))
	e.apply(old, drivers.Created)
	before := e.tree("/srv/app")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := &drivers.ArchiveSpec{Path: "/srv/app", Source: srv.URL + "/app.tar.gz", Digest: sum(data), Format: drivers.FormatTarGz}
	result := make(chan error, 1)
	go func() {
		_, err := e.d.Apply(ctx, s)
		result <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the download did not start within 10s")
	}
	cancel()
	select {
	case err := <-result:
		wantErr(t, err, context.Canceled)
	case <-time.After(2 * time.Second):
		t.Fatal("Apply did not return within 2s of the cancellation")
	}
	if after := e.tree("/srv/app"); after != before {
		t.Errorf("a cancelled Apply changed the destination:\n got: %s\nwant: %s", after, before)
	}
	e.noLeftovers("/srv", "app")
}

// TestDownloadLimit: a source larger than an archive within the limits
// could be is refused, whether its length is announced or not.
func TestDownloadLimit(t *testing.T) {
	data := tarOf(t, file("big", strings.Repeat("x", 5000)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < len(data); i += 512 { // chunked: no length announced
			_, _ = w.Write(data[i:min(i+512, len(data))])
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, archive.Options{MaxBytes: 100, MaxEntries: 1, HTTPClient: srv.Client()})
	for _, s := range []*drivers.ArchiveSpec{
		{Path: "/srv/app", Source: srv.URL + "/a.tar", Digest: sum(data), Format: drivers.FormatTar},
		e.spec("/srv/app", drivers.FormatTar, data),
	} {
		_, err := e.d.Apply(t.Context(), s)
		wantErr(t, err, archive.ErrLimit, "more than 1124 bytes")
		e.noLeftovers("/srv")
	}
}

// TestGoMadeFormats unpacks each format as Go's own writers (and the zstd
// module's) make it, whatever tools the machine has.
func TestGoMadeFormats(t *testing.T) {
	ents := []ent{{name: "dir/", typ: tar.TypeDir, mode: 0o700}, file("dir/a.txt", "a\n"), {name: "run", body: "#!/bin/sh\n", mode: 0o755}}
	zst := func(t *testing.T) []byte {
		var buf bytes.Buffer
		zw, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zw.Write(tarOf(t, ents...)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for format, data := range map[string][]byte{
		drivers.FormatTar:    tarOf(t, ents...),
		drivers.FormatTarGz:  tgzOf(t, ents...),
		drivers.FormatTarZst: zst(t),
		drivers.FormatZip:    zipOf(t, ents...),
	} {
		t.Run(format, func(t *testing.T) {
			e := newEnv(t, archive.Options{})
			s := e.spec("/srv/app", format, data)
			e.apply(s, drivers.Created)
			for p, want := range map[string]string{"/srv/app/dir/a.txt": "a\n", "/srv/app/run": "#!/bin/sh\n"} {
				if got := e.read(p); got != want {
					t.Errorf("%s = %q, want %q", p, got, want)
				}
			}
			for p, want := range map[string]string{"/srv/app": "0755", "/srv/app/dir": "0700", "/srv/app/run": "0755", "/srv/app/dir/a.txt": "0644"} {
				if got := modeOf(t, e.root.Host(p)); got != want {
					t.Errorf("mode of %s = %s, want %s", p, got, want)
				}
			}
			e.apply(s, drivers.Unchanged)
		})
	}
}

// TestLongName: a destination whose name is as long as a name can be
// still gets staging names that fit.
func TestLongName(t *testing.T) {
	e := newEnv(t, archive.Options{})
	s := e.spec("/srv/"+strings.Repeat("n", 255), drivers.FormatTar, tarOf(t, file("a", "x")))
	e.apply(s, drivers.Created)
	e.apply(s, drivers.Unchanged)
	if err := e.d.Remove(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	e.noLeftovers("/srv")
}

// TestFileSourceIsBeneathTheRoot: a file source names a path beneath the
// root, as every path a declaration names does. Each source here reaches,
// or would reach, an archive outside the root whose digest is the one
// declared: read, it would unpack. Each is refused, and nothing is
// unpacked.
func TestFileSourceIsBeneathTheRoot(t *testing.T) {
	e := newEnv(t, archive.Options{})
	data := tgzOf(t, file("secret", "from outside the root"))
	outside := t.TempDir()
	outsideArchive := filepath.Join(outside, "a.tgz")
	if err := os.WriteFile(outsideArchive, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outsideArchive, filepath.Join(e.src, "link.tgz")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(e.src, "linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(e.src, "dir.tgz"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, source string
		want         []string
		is           error
	}{
		// The machine's path is read as a path beneath the root, where
		// nothing is.
		{"the machine's own path", "file://" + outsideArchive, []string{e.root.Host(outsideArchive)}, fs.ErrNotExist},
		{"a symlink at the path", "file://" + sourceDir + "/link.tgz", []string{"a symlink, not a regular file"}, nil},
		{"a symlink in a parent", "file://" + sourceDir + "/linkdir/a.tgz", []string{"linkdir"}, nil},
		{"a directory", "file://" + sourceDir + "/dir.tgz", []string{"a directory, not a regular file"}, nil},
		{"dot-dot out of the root", "file://" + sourceDir + "/../../../../" + outsideArchive, nil, drivers.ErrInvalidSpec},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &drivers.ArchiveSpec{Path: "/srv/app", Source: c.source, Digest: sum(data), Format: drivers.FormatTarGz}
			_, err := e.d.Apply(t.Context(), s)
			t.Logf("Apply: %v", err)
			if err == nil {
				t.Fatalf("Apply(%s) unpacked an archive from outside the root", c.source)
			}
			wantErr(t, err, c.is, c.want...)
			if _, err := os.Lstat(e.root.Host("/srv/app")); !os.IsNotExist(err) {
				t.Errorf("/srv/app exists after a refused source: %v", err)
			}
			e.noLeftovers("/srv")
		})
	}
}

// TestFetchTimeout: a source that trickles its bytes is given up after
// Options.FetchTimeout, whatever the transport's own timeouts, and the
// destination is left as it was.
func TestFetchTimeout(t *testing.T) {
	data := tgzOf(t, file("big", strings.Repeat("0123456789abcdef", 1<<12)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		for i := range data { // a byte every 10 ms: minutes for the whole
			if _, err := w.Write(data[i : i+1]); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	e := newEnv(t, archive.Options{HTTPClient: &http.Client{}, FetchTimeout: 300 * time.Millisecond})
	s := &drivers.ArchiveSpec{Path: "/srv/app", Source: srv.URL + "/a.tgz", Digest: sum(data), Format: drivers.FormatTarGz}
	result := make(chan error, 1)
	go func() {
		_, err := e.d.Apply(t.Context(), s)
		result <- err
	}()
	select {
	case err := <-result:
		wantErr(t, err, context.DeadlineExceeded, "took longer than 300ms", "FetchTimeout")
	case <-time.After(30 * time.Second):
		t.Fatal("Apply from a trickling source still runs after 30 s, with a 300 ms fetch timeout")
	}
	e.noLeftovers("/srv")
}
