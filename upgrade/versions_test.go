package upgrade_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/archive"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/upgrade"
)

// TestArrivedFileIsTheArchiveDrivers: both sides name the marker alike.
func TestArrivedFileIsTheArchiveDrivers(t *testing.T) {
	if upgrade.ArrivedFile != archive.ArrivedFile {
		t.Fatalf("upgrade.ArrivedFile %q, archive.ArrivedFile %q", upgrade.ArrivedFile, archive.ArrivedFile)
	}
}

// TestNewestIsTheLastArrival: the greatest counter wins, whatever the names
// say; half-delivered directories and look-alikes are not versions.
func TestNewestIsTheLastArrival(t *testing.T) {
	dir := t.TempDir()
	deliver(t, dir, "zzz", 1, "exit 0")
	deliver(t, dir, "aaa", 2, "exit 0")

	// Not versions, each for one reason.
	noMarker := filepath.Join(dir, "m-no-marker")
	writeFile(t, filepath.Join(noMarker, "mesh-host"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(noMarker, "mesh-host"), 0o755)
	noExe := filepath.Join(dir, "n-no-exe")
	writeFile(t, filepath.Join(noExe, "other"), "")
	mark(t, noExe, "2026-01-01T00:00:00Z 9\n")
	notExec := deliver(t, dir, "o-not-executable", 10, "")
	os.Chmod(filepath.Join(notExec, "mesh-host"), 0o644)
	deliver(t, dir, "p-bad-marker", 11, "")
	mark(t, filepath.Join(dir, "p-bad-marker"), "12\n")
	deliver(t, dir, "q-long-counter", 11, "")
	mark(t, filepath.Join(dir, "q-long-counter"), "2026-01-01T00:00:00Z 1234567890123456789\n")
	deliver(t, dir, "r-three-fields", 11, "")
	mark(t, filepath.Join(dir, "r-three-fields"), "2026-01-01T00:00:00Z 13 x\n")
	deliver(t, dir, "bad name", 14, "")
	deliver(t, dir, ".hidden", 15, "")
	deliver(t, dir, upgrade.RetiringPrefix+"old", 16, "")
	if err := os.Symlink(filepath.Join(dir, "aaa"), filepath.Join(dir, "s-link")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "t-file"), "")
	exeLink := filepath.Join(dir, "u-exe-link")
	if err := os.MkdirAll(exeLink, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(dir, "aaa", "mesh-host"), filepath.Join(exeLink, "mesh-host"))
	mark(t, exeLink, "2026-01-01T00:00:00Z 17\n")

	vs, err := upgrade.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	wantNames(t, "List", vs, "zzz", "aaa")
	v, ok, err := upgrade.Newest(dir)
	if err != nil || !ok || v.Name != "aaa" || v.Counter != 2 || v.Dir != filepath.Join(dir, "aaa") {
		t.Fatalf("Newest: got %+v %v %v, want aaa (counter 2)", v, ok, err)
	}
	if v.Arrived.IsZero() || time.Since(v.Arrived) > time.Hour {
		t.Errorf("Arrived %s, want about now", v.Arrived)
	}
	for _, n := range []string{"m-no-marker", "n-no-exe", "o-not-executable", "p-bad-marker", "bad name", "s-link", "u-exe-link"} {
		if _, err := upgrade.Lookup(dir, n); !errors.Is(err, upgrade.ErrNotVersion) {
			t.Errorf("Lookup(%q): got %v, want ErrNotVersion", n, err)
		}
	}

	// A marker without its newline, and a tie: the name sorting first wins.
	deliver(t, dir, "kkk", 3, "")
	mark(t, filepath.Join(dir, "kkk"), "2026-01-01T00:00:00Z 3")
	deliver(t, dir, "jjj", 3, "")
	if v, _, _ := upgrade.Newest(dir); v.Name != "jjj" {
		t.Errorf("of two with counter 3, Newest is %s, want jjj", v.Name)
	}
}

func TestListMissingDir(t *testing.T) {
	vs, err := upgrade.List(filepath.Join(t.TempDir(), "nowhere"))
	if err != nil || len(vs) != 0 {
		t.Fatalf("got %v, %v; want nothing, no error", vs, err)
	}
	if _, ok, err := upgrade.Newest(filepath.Join(t.TempDir(), "nowhere")); ok || err != nil {
		t.Fatalf("Newest of nothing: %v %v", ok, err)
	}
}

func TestParseArrival(t *testing.T) {
	for _, tc := range []struct {
		in      string
		counter uint64
		timed   bool
		bad     bool
	}{
		{in: "2026-11-25T10:04:05.123456789Z 7\n", counter: 7, timed: true},
		{in: "2026-11-25T10:04:05Z\t8", counter: 8, timed: true},
		{in: "yesterday 9\nsecond line", counter: 9},
		{in: "  2026-11-25T10:04:05Z   10  \n", counter: 10, timed: true},
		{in: "", bad: true},
		{in: "7\n", bad: true},
		{in: "t -1\n", bad: true},
		{in: "t 1 2\n", bad: true},
		{in: "t 0x10\n", bad: true},
		{in: "t 1234567890123456789\n", bad: true},
	} {
		at, c, err := upgrade.ParseArrival([]byte(tc.in))
		if tc.bad {
			if !errors.Is(err, upgrade.ErrBadMarker) {
				t.Errorf("ParseArrival(%q): got %v, want ErrBadMarker", tc.in, err)
			}
			continue
		}
		if err != nil || c != tc.counter || at.IsZero() == tc.timed {
			t.Errorf("ParseArrival(%q): got %s %d %v, want counter %d (timed %v)", tc.in, at, c, err, tc.counter, tc.timed)
		}
	}
}

func TestPick(t *testing.T) {
	dir := t.TempDir()
	deliver(t, dir, "b-first", 1, "")
	deliver(t, dir, "a-second", 2, "")
	deliver(t, dir, "c-third", 3, "")
	vs, _ := upgrade.List(dir)
	for _, tc := range []struct{ kg, bad, want string }{
		{"", "", "c-third"},
		{"a-second", "", "c-third"},
		{"a-second", "c-third", "a-second"}, // rolled back from the newest
		{"a-second", "b-first", "c-third"},  // a stale mark: something newer arrived
		{"", "c-third", "c-third"},          // nothing to roll back to
		{"gone", "c-third", "c-third"},      // the known-good is not on disk
	} {
		if v, ok := upgrade.Pick(vs, tc.kg, tc.bad); !ok || v.Name != tc.want {
			t.Errorf("Pick(known-good %q, bad %q): got %s, want %s", tc.kg, tc.bad, v.Name, tc.want)
		}
	}
	if _, ok := upgrade.Pick(nil, "a", ""); ok {
		t.Error("Pick of no versions said ok")
	}
}

func TestRunning(t *testing.T) {
	dir := t.TempDir()
	vdir := deliver(t, dir, "v1", 4, "")
	v, managed, err := upgrade.Running(filepath.Join(vdir, "mesh-host"), dir)
	if err != nil || !managed || v.Name != "v1" || v.Counter != 4 {
		t.Fatalf("in a version: got %+v %v %v", v, managed, err)
	}
	// Through a symlinked versions directory, as /proc/self/exe resolves it.
	link := filepath.Join(t.TempDir(), "versions")
	os.Symlink(dir, link)
	if v, managed, err := upgrade.Running(filepath.Join(vdir, "mesh-host"), link); err != nil || !managed || v.Name != "v1" {
		t.Fatalf("through a link: got %+v %v %v", v, managed, err)
	}
	for _, exe := range []string{"/usr/local/bin/mesh-host", filepath.Join(vdir, "other"), filepath.Join(dir, "mesh-host"), filepath.Join(vdir, "sub", "mesh-host")} {
		if _, managed, err := upgrade.Running(exe, dir); managed || err != nil {
			t.Errorf("Running(%s): managed %v, err %v; want unmanaged", exe, managed, err)
		}
	}
	if _, managed, err := upgrade.Running("/x/mesh-host", filepath.Join(dir, "nowhere")); managed || err != nil {
		t.Errorf("no versions directory: managed %v, err %v", managed, err)
	}
	half := filepath.Join(dir, "half")
	writeFile(t, filepath.Join(half, "mesh-host"), "")
	if _, managed, err := upgrade.Running(filepath.Join(half, "mesh-host"), dir); managed || !errors.Is(err, upgrade.ErrNotVersion) {
		t.Errorf("half-delivered: managed %v, err %v; want ErrNotVersion", managed, err)
	}
}

// TestArchiveDeliveries: two versions delivered by the real archive driver,
// whose names sort the other way round, are both listed and the later is
// the newest.
func TestArchiveDeliveries(t *testing.T) {
	rootDir := t.TempDir()
	versions := filepath.Join(rootDir, "opt/mesh-host/versions")
	if err := os.MkdirAll(versions, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := rootfs.Open(rootDir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	d := archive.New(root, archive.Options{})
	for _, name := range []string{"ffff", "0000"} {
		src, digest := tarGz(t, rootDir, "#!/bin/sh\necho "+name+"\n")
		spec := &drivers.ArchiveSpec{Path: "/opt/mesh-host/versions/" + name, Source: "file://" + src, Digest: digest, Format: "tar.gz"}
		if _, err := d.Apply(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
	}
	vs, err := upgrade.List(versions)
	if err != nil {
		t.Fatal(err)
	}
	wantNames(t, "List", vs, "ffff", "0000")
	if v, _, _ := upgrade.Newest(versions); v.Name != "0000" {
		t.Errorf("Newest: %s, want 0000 (delivered last)", v.Name)
	}
}

// tarGz writes a tar.gz holding an executable mesh-host beneath rootDir
// (a file source is beneath the root) and returns its path there and its
// digest.
func tarGz(t *testing.T, rootDir, exe string) (path, digest string) {
	t.Helper()
	dir, err := os.MkdirTemp(rootDir, "release-")
	if err != nil {
		t.Fatal(err)
	}
	path = "/" + filepath.Base(dir) + "/release.tar.gz"
	f, err := os.Create(filepath.Join(rootDir, path))
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "mesh-host", Mode: 0o755, Size: int64(len(exe)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(exe))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	f.Close()
	b, _ := os.ReadFile(filepath.Join(rootDir, path))
	sum := sha256.Sum256(b)
	return path, "sha256:" + hex.EncodeToString(sum[:])
}
