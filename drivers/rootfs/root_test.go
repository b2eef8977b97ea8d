package rootfs_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// newRoot is a Root over a fresh directory, with the directories dirs made
// beneath it.
func newRoot(t *testing.T, dirs ...string) *rootfs.Root {
	t.Helper()
	dir := t.TempDir()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r, err := rootfs.Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	return r
}

func writeHostFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDirRefusesSymlink(t *testing.T) {
	r := newRoot(t, "real/sub")
	outside := t.TempDir()
	if err := os.Symlink("real", r.Host("/inside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, r.Host("/outside")); err != nil {
		t.Fatal(err)
	}
	writeHostFile(t, r.Host("/real/file"), "x")
	for _, p := range []string{"/inside", "/inside/sub", "/outside", "/real/sub/../../outside", "/real/file", "/real/file/x"} {
		d, err := r.OpenDir(p)
		if err == nil {
			d.Close()
			t.Errorf("OpenDir(%q): got nil error, want ErrUnsafePath", p)
			continue
		}
		if !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("OpenDir(%q): got %v, want an error wrapping ErrUnsafePath", p, err)
		}
	}
	d, err := r.OpenDir("/real/sub")
	if err != nil {
		t.Fatalf("OpenDir(/real/sub): %v", err)
	}
	d.Close()
	if _, err := r.OpenDir("/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("OpenDir(/missing): got %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestRemove(t *testing.T) {
	r := newRoot(t, "d/full", "d/empty")
	writeHostFile(t, r.Host("/d/file"), "x")
	writeHostFile(t, r.Host("/d/full/foreign"), "x")
	outside := t.TempDir()
	writeHostFile(t, filepath.Join(outside, "target"), "keep")
	if err := os.Symlink(filepath.Join(outside, "target"), r.Host("/d/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, r.Host("/linkdir")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path    string
		wantErr error // nil: removed or missing
		gone    bool
	}{
		{"/d/missing", nil, true},
		{"/missing/parent/file", nil, true},
		{"/d/file", nil, true},
		{"/d/empty", nil, true},
		{"/d/link", nil, true}, // the link, not its target
		{"/d/full", unix.ENOTEMPTY, false},
		{"/linkdir/target", drivers.ErrUnsafePath, false},
	}
	for _, tt := range tests {
		err := r.Remove(tt.path)
		if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
			t.Errorf("Remove(%q): got %v, want %v", tt.path, err, tt.wantErr)
		}
		_, err = r.Lstat(tt.path)
		if gone := errors.Is(err, fs.ErrNotExist); gone != tt.gone && tt.wantErr != drivers.ErrUnsafePath {
			t.Errorf("after Remove(%q): gone %v, want %v", tt.path, gone, tt.gone)
		}
	}
	if b, err := os.ReadFile(filepath.Join(outside, "target")); err != nil || string(b) != "keep" {
		t.Errorf("outside target: got %q, %v; want %q untouched", b, err, "keep")
	}
	if _, err := os.Lstat(r.Host("/d/full/foreign")); err != nil {
		t.Errorf("foreign file in a non-empty directory: %v, want it left", err)
	}
}

func TestLookup(t *testing.T) {
	bare := newRoot(t)
	withFiles := newRoot(t, "etc")
	writeHostFile(t, withFiles.Host("/etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n# comment\napp:x:1234:1234::/:/bin/false\nbad:x:notanumber:1::/:/bin/false\n")
	// A line longer than a bufio.Scanner takes must not hide what follows.
	writeHostFile(t, withFiles.Host("/etc/group"), "root:x:0:\nbig:x:7:"+strings.Repeat("u,", 40000)+"u\napp:x:1234:\n")

	tests := []struct {
		name   string
		root   *rootfs.Root
		lookup string // "user" or "group"
		arg    string
		want   int
		errHas []string // nil: no error
	}{
		{"root without passwd", bare, "user", "root", 0, nil},
		{"empty is root without passwd", bare, "user", "", 0, nil},
		{"root without group", bare, "group", "root", 0, nil},
		{"unknown without passwd", bare, "user", "app", 0, []string{`"app"`, "/etc/passwd"}},
		{"unknown without group", bare, "group", "app", 0, []string{`"app"`, "/etc/group"}},
		{"user from passwd", withFiles, "user", "app", 1234, nil},
		{"group after a long line", withFiles, "group", "app", 1234, nil},
		{"unknown user", withFiles, "user", "nobody-here", 0, []string{`"nobody-here"`, "/etc/passwd"}},
		{"unknown group", withFiles, "group", "nobody-here", 0, []string{`"nobody-here"`, "/etc/group"}},
		{"id not a number", withFiles, "user", "bad", 0, []string{`"bad"`, "notanumber"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lookup := tt.root.LookupUser
			if tt.lookup == "group" {
				lookup = tt.root.LookupGroup
			}
			got, err := lookup(tt.arg)
			if tt.errHas == nil {
				if err != nil || got != tt.want {
					t.Fatalf("Lookup %s %q: got %d, %v; want %d", tt.lookup, tt.arg, got, err, tt.want)
				}
				return
			}
			if !errors.Is(err, drivers.ErrInvalidSpec) {
				t.Fatalf("Lookup %s %q: got %d, %v; want an error wrapping ErrInvalidSpec", tt.lookup, tt.arg, got, err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Lookup %s %q: error %q does not say %s", tt.lookup, tt.arg, err, s)
				}
			}
		})
	}
}

func TestSyncFS(t *testing.T) {
	r := newRoot(t, "etc")
	if err := r.SyncFS(); err != nil {
		t.Fatalf("SyncFS: %v", err)
	}
}

func TestMkdirOverNonDirectory(t *testing.T) {
	r := newRoot(t, "d/existing")
	writeHostFile(t, r.Host("/d/file"), "x")
	outside := t.TempDir()
	if err := os.Symlink(outside, r.Host("/d/link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path        string
		wantCreated bool
		wantErr     error
	}{
		{"/d/new", true, nil},
		{"/d/existing", false, nil},
		{"/d/file", false, fs.ErrExist},
		{"/d/link", false, drivers.ErrUnsafePath},
		{"/d/link/sub", false, drivers.ErrUnsafePath},
		{"/d/missing/sub", false, fs.ErrNotExist},
	}
	for _, tt := range tests {
		created, err := r.Mkdir(tt.path, 0o750, 0, 0)
		if created != tt.wantCreated || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
			t.Errorf("Mkdir(%q): got %v, %v; want %v, %v", tt.path, created, err, tt.wantCreated, tt.wantErr)
		}
	}
	st, err := r.Lstat("/d/new")
	if err != nil || st.Mode&0o7777 != 0o750 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("Lstat(/d/new): got mode %o, %v; want a directory with mode 0750", st.Mode, err)
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("outside directory: got %d entries, want none", len(entries))
	}
}

func TestWriteFile(t *testing.T) {
	r := newRoot(t, "d")
	long := strings.Repeat("n", 250)
	tests := []struct {
		name string
		path string
		mode drivers.Mode
	}{
		{"plain", "/d/plain", 0o644},
		{"setuid", "/d/setuid", 0o4755},
		{"setgid and sticky", "/d/setgid", 0o3750},
		{"long name", "/d/" + long, 0o600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := r.WriteFile(tt.path, []byte(tt.name), rootfs.WriteOptions{Mode: tt.mode, UID: 1234, GID: 4321, Sync: true}); err != nil {
				t.Fatalf("WriteFile(%q): %v", tt.path, err)
			}
			st, err := r.Lstat(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if got := drivers.Mode(st.Mode & 0o7777); got != tt.mode {
				t.Errorf("mode: got %s, want %s", got, tt.mode)
			}
			if st.Uid != 1234 || st.Gid != 4321 {
				t.Errorf("owner: got %d:%d, want 1234:4321", st.Uid, st.Gid)
			}
			b, err := r.ReadFile(tt.path)
			if err != nil || string(b) != tt.name {
				t.Errorf("ReadFile: got %q, %v; want %q", b, err, tt.name)
			}
		})
	}
	entries, err := os.ReadDir(r.Host("/d"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.Contains(e.Name(), ".mesh-host-") {
			t.Errorf("temporary file %s left beside the files", e.Name())
		}
	}
}

func TestReadFileRefusesNonRegular(t *testing.T) {
	r := newRoot(t, "d/dir")
	outside := t.TempDir()
	writeHostFile(t, filepath.Join(outside, "secret"), "secret")
	if err := os.Symlink(filepath.Join(outside, "secret"), r.Host("/d/link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(r.Host("/d/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/d/link", "/d/dir", "/d/fifo"} {
		if b, err := r.ReadFile(p); !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("ReadFile(%q): got %q, %v; want an error wrapping ErrUnsafePath", p, b, err)
		}
		if err := r.Chown(p, 0o600, 0, 0); p != "/d/dir" && !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("Chown(%q): got %v, want an error wrapping ErrUnsafePath", p, err)
		}
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count descriptors: %v", err)
	}
	return len(ents)
}

// A batch of staged files holds at most MaxHeldDirs directories open,
// however many directories it stages in: a first apply of 100,000 files
// does not run out of descriptors. Every file still commits.
func TestStagedFilesHoldFewDescriptors(t *testing.T) {
	n := rootfs.MaxHeldDirs + 200
	var dirs []string
	for i := range n {
		dirs = append(dirs, fmt.Sprintf("d%04d", i))
	}
	r := newRoot(t, dirs...)
	rootfs.StageNamed(r) // the directories' bound; unnamed files have their own
	before := openFDs(t)
	var staged []*rootfs.Staged
	for i, d := range dirs {
		s, err := r.StageFile("/"+d+"/f", []byte(fmt.Sprint(i)), rootfs.WriteOptions{Mode: 0o644, UID: os.Getuid(), GID: os.Getgid()})
		if err != nil {
			t.Fatal(err)
		}
		staged = append(staged, s)
	}
	if held := openFDs(t) - before; held > rootfs.MaxHeldDirs+8 {
		t.Errorf("%d files staged in %d directories hold %d descriptors; want at most %d", n, n, held, rootfs.MaxHeldDirs)
	}
	for _, s := range staged {
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(t); after > before+4 {
		t.Errorf("%d descriptors left open after every commit", after-before)
	}
	for i, d := range dirs {
		got, err := os.ReadFile(r.Host("/" + d + "/f"))
		if err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("/%s/f: %q, %v", d, got, err)
		}
	}
}

// A staged file whose directory was let go commits through its path
// checked again: a directory swapped for a symlink meanwhile refuses the
// commit, and nothing is written where the symlink points.
func TestStagedFileRecheckedAtCommit(t *testing.T) {
	n := rootfs.MaxHeldDirs + 1
	var dirs []string
	for i := range n {
		dirs = append(dirs, fmt.Sprintf("d%04d", i))
	}
	r := newRoot(t, dirs...)
	var staged []*rootfs.Staged
	for _, d := range dirs {
		s, err := r.StageFile("/"+d+"/f", []byte("x"), rootfs.WriteOptions{Mode: 0o644, UID: os.Getuid(), GID: os.Getgid()})
		if err != nil {
			t.Fatal(err)
		}
		staged = append(staged, s)
	}
	// The last one staged let its directory go.
	last := dirs[n-1]
	outside := t.TempDir()
	if err := os.Rename(r.Host("/"+last), r.Host("/"+last+".old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, r.Host("/"+last)); err != nil {
		t.Fatal(err)
	}
	if err := staged[n-1].Commit(); err == nil {
		t.Fatal("a commit through a directory swapped for a symlink succeeded")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the commit wrote %d entries outside the root", len(ents))
	}
	for _, s := range staged[:n-1] {
		s.Abort()
	}
}

// Flush and FlushRename work on a staged file whose directory is held and
// on one whose directory was let go, keep what is held for the Commit
// between them, and leave no descriptor open; a temporary file replaced by
// a symlink is not followed.
func TestStagedFileFlushesItself(t *testing.T) {
	n := rootfs.MaxHeldDirs + 2
	var dirs []string
	for i := range n {
		dirs = append(dirs, fmt.Sprintf("d%04d", i))
	}
	r := newRoot(t, dirs...)
	before := openFDs(t)
	var staged []*rootfs.Staged
	for i, d := range dirs {
		s, err := r.StageFile("/"+d+"/f", []byte(fmt.Sprint(i)), rootfs.WriteOptions{Mode: 0o644, UID: os.Getuid(), GID: os.Getgid()})
		if err != nil {
			t.Fatal(err)
		}
		staged = append(staged, s)
	}
	for i, s := range staged {
		if err := s.Flush(); err != nil {
			t.Fatalf("Flush %s: %v", dirs[i], err)
		}
		if err := s.Commit(); err != nil {
			t.Fatalf("Commit %s after Flush: %v", dirs[i], err)
		}
		if err := s.FlushRename(); err != nil {
			t.Fatalf("FlushRename %s: %v", dirs[i], err)
		}
	}
	if after := openFDs(t); after > before+4 {
		t.Errorf("%d descriptors left open after flushing and committing each", after-before)
	}
	for i, d := range dirs {
		got, err := os.ReadFile(r.Host("/" + d + "/f"))
		if err != nil || string(got) != fmt.Sprint(i) {
			t.Fatalf("/%s/f: %q, %v", d, got, err)
		}
	}

	// A temporary file swapped for a symlink to a file outside. (A file
	// staged unnamed has no name to swap.)
	rootfs.StageNamed(r)
	s, err := r.StageFile("/"+dirs[0]+"/g", []byte("x"), rootfs.WriteOptions{Mode: 0o644, UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Abort()
	ents, err := os.ReadDir(r.Host("/" + dirs[0]))
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "target")
	writeHostFile(t, outside, "outside")
	for _, e := range ents {
		if strings.Contains(e.Name(), ".mesh-host-") {
			tmp := r.Host("/" + dirs[0] + "/" + e.Name())
			if err := os.Remove(tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, tmp); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Flush(); err == nil {
		t.Error("Flush followed a symlink planted as the temporary file")
	}
}

// stageConcurrently stages n files, eight at a time, at the paths format
// gives each index, each holding its index; the staged files by index.
func stageConcurrently(t *testing.T, r *rootfs.Root, n int, format string, mode drivers.Mode) []*rootfs.Staged {
	t.Helper()
	staged := make([]*rootfs.Staged, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				s, err := r.StageFile(fmt.Sprintf(format, i), []byte(fmt.Sprint(i)), rootfs.WriteOptions{Mode: mode, UID: os.Getuid(), GID: os.Getgid()})
				if err != nil {
					errs <- err
					return
				}
				staged[i] = s
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return staged
}

// Files staged in one directory, many at once, share its descriptor: a
// batch of them holds a few descriptors, not one a file, and opens the
// directory once. Every file commits, and nothing stays open.
func TestStagedFilesInOneDirectoryShareIt(t *testing.T) {
	const n = 2*rootfs.MaxHeldDirs + 10
	r := newRoot(t, "etc/app")
	rootfs.StageNamed(r) // unnamed files hold one each (TestUnnamedStagingIsBounded)
	before := openFDs(t)
	staged := stageConcurrently(t, r, n, "/etc/app/f%04d", 0o4640)
	if held := openFDs(t) - before; held > 8 {
		t.Errorf("%d files staged in one directory hold %d descriptors", n, held)
	}
	for _, s := range staged {
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if after := openFDs(t); after > before+4 {
		t.Errorf("%d descriptors left open after every commit", after-before)
	}
	for i := range n {
		p := r.Host(fmt.Sprintf("/etc/app/f%04d", i))
		got, err := os.ReadFile(p)
		fi, serr := os.Stat(p)
		if err != nil || serr != nil || string(got) != fmt.Sprint(i) || fi.Mode() != 0o640|fs.ModeSetuid {
			t.Fatalf("%s: %q, %v, %v, %v", p, got, fi.Mode(), err, serr)
		}
	}
}

// A directory swapped for a symlink while a batch stages in it: the files
// staged after the swap go into the directory the batch checked and holds,
// never where the symlink points. Once the directory is no longer shared
// (shareHeldFor), a file staged there is refused, as it always was when
// each file opened its directory.
func TestStagingAfterTheDirectoryIsSwapped(t *testing.T) {
	opts := rootfs.WriteOptions{Mode: 0o644, UID: os.Getuid(), GID: os.Getgid()}
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			r := newRoot(t, "d")
			if !shared {
				rootfs.ShareHeldFor(r, 0)
			}
			first, err := r.StageFile("/d/first", []byte("1"), opts)
			if err != nil {
				t.Fatal(err)
			}
			outside := t.TempDir()
			if err := os.Rename(r.Host("/d"), r.Host("/d.old")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, r.Host("/d")); err != nil {
				t.Fatal(err)
			}
			second, err := r.StageFile("/d/second", []byte("2"), opts)
			switch {
			case shared && err != nil:
				t.Fatalf("staged in the held directory: %v", err)
			case !shared && !errors.Is(err, drivers.ErrUnsafePath):
				t.Fatalf("staged through a symlinked directory: %v, want ErrUnsafePath", err)
			}
			for _, s := range []*rootfs.Staged{first, second} {
				if s != nil {
					if err := s.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Errorf("%d entries written where the symlink points", len(ents))
			}
			want := []string{"first"}
			if shared {
				want = append(want, "second")
			}
			var got []string
			ents, _ := os.ReadDir(r.Host("/d.old"))
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("the directory checked holds %v, want %v", got, want)
			}
		})
	}
}

// needUnnamed skips t, saying why, where r's filesystem has no O_TMPFILE
// (overlayfs before Linux 6.6, some network filesystems): files are staged
// named there, which the other tests cover.
func needUnnamed(t *testing.T, r *rootfs.Root) {
	t.Helper()
	probe, err := r.StageFile("/unnamed-probe", nil, rootfs.WriteOptions{Mode: 0o600, UID: os.Getuid(), GID: os.Getgid()})
	if err != nil {
		t.Fatal(err)
	}
	unnamed := rootfs.Unnamed(r)
	probe.Abort()
	if unnamed != 1 {
		t.Skipf("no file can be staged unnamed (O_TMPFILE) on the filesystem of %s: the unnamed staging is not tested here", r.Dir())
	}
}

// Files are staged without a name (O_TMPFILE) up to StageBatch at once,
// one descriptor each; past it, under a temporary name, holding none.
// Nothing unnamed shows in the directory before its commit; every file
// commits, and no descriptor stays open.
func TestUnnamedStagingIsBounded(t *testing.T) {
	r := newRoot(t, "etc/app")
	needUnnamed(t, r)
	batch := r.StageBatch()
	if batch < 2 {
		t.Skipf("the descriptor limit leaves %d file(s) staged unnamed", batch)
	}
	n := batch + 64
	before := openFDs(t)
	staged := stageConcurrently(t, r, n, "/etc/app/f%05d", 0o640)
	if got := rootfs.Unnamed(r); got != batch {
		t.Errorf("%d files staged unnamed of %d, want %d", got, n, batch)
	}
	if held := openFDs(t) - before; held > batch+8 {
		t.Errorf("%d staged files hold %d descriptors, want at most %d", n, held, batch+8)
	}
	ents, err := os.ReadDir(r.Host("/etc/app"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != n-batch {
		t.Errorf("%d entries in the directory before any commit, want the %d staged named", len(ents), n-batch)
	}
	for _, s := range staged {
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if got := rootfs.Unnamed(r); got != 0 {
		t.Errorf("%d still counted unnamed after every commit", got)
	}
	if after := openFDs(t); after > before+4 {
		t.Errorf("%d descriptors left open after every commit", after-before)
	}
	if ents, _ := os.ReadDir(r.Host("/etc/app")); len(ents) != n {
		t.Errorf("%d entries after the commits, want %d", len(ents), n)
	}
	for i := range n {
		p := r.Host(fmt.Sprintf("/etc/app/f%05d", i))
		got, err := os.ReadFile(p)
		fi, serr := os.Lstat(p)
		if err != nil || serr != nil || string(got) != fmt.Sprint(i) || fi.Mode() != 0o640 {
			t.Fatalf("%s: %q, %v, %v, %v", p, got, fi.Mode(), err, serr)
		}
	}
}

// A file staged unnamed replaces what is at its path only at its commit:
// a file, or a symlink planted there meanwhile, which is replaced and not
// followed. An aborted one leaves nothing.
func TestUnnamedCommitReplacesAndNeverFollows(t *testing.T) {
	r := newRoot(t, "etc")
	needUnnamed(t, r)
	opts := rootfs.WriteOptions{Mode: 0o600, UID: os.Getuid(), GID: os.Getgid()}
	writeHostFile(t, r.Host("/etc/old"), "old")
	outside := filepath.Join(t.TempDir(), "target")
	writeHostFile(t, outside, "outside")

	over, err := r.StageFile("/etc/old", []byte("new"), opts)
	if err != nil {
		t.Fatal(err)
	}
	planted, err := r.StageFile("/etc/planted", []byte("mine"), opts)
	if err != nil {
		t.Fatal(err)
	}
	aborted, err := r.StageFile("/etc/aborted", []byte("never"), opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := rootfs.Unnamed(r); got != 3 {
		t.Fatalf("%d of 3 files staged unnamed", got)
	}
	if got, _ := os.ReadFile(r.Host("/etc/old")); string(got) != "old" {
		t.Errorf("before the commit /etc/old holds %q", got)
	}
	if err := os.Symlink(outside, r.Host("/etc/planted")); err != nil {
		t.Fatal(err)
	}
	aborted.Abort()
	for _, s := range []*rootfs.Staged{over, planted} {
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{"/etc/old": "new", "/etc/planted": "mine"} {
		fi, err := os.Lstat(r.Host(p))
		got, _ := os.ReadFile(r.Host(p))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || string(got) != want {
			t.Errorf("%s: %v, %q, %v; want a regular file 0600 holding %q", p, fi.Mode(), got, err, want)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "outside" {
		t.Errorf("the symlink's target now holds %q", got)
	}
	ents, _ := os.ReadDir(r.Host("/etc"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "old planted" {
		t.Errorf("/etc holds %v, want [old planted]", names)
	}
	if got := rootfs.Unnamed(r); got != 0 {
		t.Errorf("%d still counted unnamed", got)
	}
}
