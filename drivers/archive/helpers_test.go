package archive_test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/archive"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// ent is one archive entry to craft: a regular file unless typ says
// otherwise.
type ent struct {
	name string
	body string
	mode int64
	typ  byte
	link string
}

func file(name, body string) ent { return ent{name: name, body: body, mode: 0o644} }

// tarOf crafts a plain tar with Go's archive/tar.
func tarOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		hdr := &tar.Header{Typeflag: typ, Name: e.name, Mode: e.mode, Linkname: e.link,
			ModTime: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipOf(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tgzOf(t testing.TB, ents ...ent) []byte { return gzipOf(t, tarOf(t, ents...)) }

// zipOf crafts a zip with Go's archive/zip; mode carries the type bits.
func zipOf(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range ents {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate}
		mode := fs.FileMode(e.mode & 0o777)
		if e.mode&0o4000 != 0 {
			mode |= fs.ModeSetuid
		}
		switch e.typ {
		case tar.TypeSymlink:
			mode |= fs.ModeSymlink
		case tar.TypeDir:
			mode |= fs.ModeDir
		case tar.TypeFifo:
			mode |= fs.ModeNamedPipe
		}
		h.SetMode(mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		body := e.body
		if e.typ == tar.TypeSymlink {
			body = e.link
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// env is a driver over a fresh root with /srv in it, and the directory in
// the root its archives are fetched from (a file source is beneath the
// root).
type env struct {
	t       *testing.T
	rootDir string
	root    *rootfs.Root
	src     string
	d       *archive.Driver
}

func newEnv(t *testing.T, opts archive.Options) *env {
	t.Helper()
	return newEnvAt(t, t.TempDir(), opts)
}

// newEnvAt is newEnv with its root at rootDir, an empty directory.
func newEnvAt(t *testing.T, rootDir string, opts archive.Options) *env {
	t.Helper()
	e := &env{t: t, rootDir: rootDir}
	if err := os.Mkdir(filepath.Join(e.rootDir, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	e.src = filepath.Join(e.rootDir, sourceDir)
	if err := os.MkdirAll(e.src, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := rootfs.Open(e.rootDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	e.root = root
	e.d = archive.New(root, opts)
	return e
}

// sourceDir is where, beneath the root, a test's archives are fetched from.
const sourceDir = "/var/cache/archives"

// spec writes data into the source directory and returns the spec
// unpacking it at dest.
func (e *env) spec(dest, format string, data []byte) *drivers.ArchiveSpec {
	e.t.Helper()
	f, err := os.CreateTemp(e.src, "archive-*."+format)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		e.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		e.t.Fatal(err)
	}
	return &drivers.ArchiveSpec{Path: dest, Source: e.fileURL(f.Name()), Digest: sum(data), Format: format}
}

// fileURL is the file source naming the file at host path p, which is
// beneath the root.
func (e *env) fileURL(p string) string {
	rel, err := filepath.Rel(e.rootDir, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		e.t.Fatalf("%s is not beneath the root %s", p, e.rootDir)
	}
	return (&url.URL{Scheme: "file", Path: "/" + rel}).String()
}

// sourcePath is the host path a file source names.
func (e *env) sourcePath(s *drivers.ArchiveSpec) string {
	u, err := url.Parse(s.Source)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.root.Host(u.Path)
}

func (e *env) apply(s *drivers.ArchiveSpec, want drivers.Action) {
	e.t.Helper()
	got, err := e.d.Apply(e.t.Context(), s)
	if err != nil {
		e.t.Fatalf("Apply(%s): %v", s.Path, err)
	}
	if got != want {
		e.t.Errorf("Apply(%s): got %q, want %q", s.Path, got, want)
	}
}

func (e *env) observe(s *drivers.ArchiveSpec) drivers.Observation {
	e.t.Helper()
	obs, err := e.d.Observe(e.t.Context(), s)
	if err != nil {
		e.t.Fatalf("Observe(%s): %v", s.Path, err)
	}
	return obs
}

// tree lists the tree at p in the root, byte for byte (driverstest.Tree),
// or "absent".
func (e *env) tree(p string) string {
	e.t.Helper()
	if _, err := os.Lstat(e.root.Host(p)); os.IsNotExist(err) {
		return "absent"
	}
	return driverstest.Tree(e.t, e.root.Host(p))
}

// names lists the directory p in the root.
func (e *env) names(p string) []string {
	e.t.Helper()
	des, err := os.ReadDir(e.root.Host(p))
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// noLeftovers fails if anything but want is in the directory p.
func (e *env) noLeftovers(p string, want ...string) {
	e.t.Helper()
	got := e.names(p)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		e.t.Errorf("%s holds %q, want %q: staging or temporary files left behind", p, got, want)
	}
}

// read reads the file p in the root.
func (e *env) read(p string) string {
	e.t.Helper()
	b, err := os.ReadFile(e.root.Host(p))
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func wantErr(t *testing.T, err error, is error, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one wrapping %v", is)
	}
	if is != nil && !errors.Is(err, is) {
		t.Errorf("got error %q, want one wrapping %q", err, is)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("got error %q, want it to contain %q", err, c)
		}
	}
}
