package file_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/file"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// newRoot is driverstest.NewRoot with the directories these tests use.
func newRoot(t *testing.T) *rootfs.Root { return driverstest.NewRoot(t, "srv/app") }

func mode(m drivers.Mode) *drivers.Mode { return &m }

func lstat(t *testing.T, name string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func readHost(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestConformance(t *testing.T) {
	changes := []struct {
		name   string
		change func(s *drivers.FileSpec)
	}{
		{"content", func(s *drivers.FileSpec) { s.Content += "changed\n"; s.Mode = mode(0o600) }},
		{"mode and owner", func(s *drivers.FileSpec) {
			s.Mode = mode(0o4750)
			s.SpecialBits = true
			s.Owner = "app"
			s.Group = "staff"
		}},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
				r := newRoot(t)
				return driverstest.Fixture{
					Driver: file.New(r),
					Specs: []drivers.Spec{
						&drivers.FileSpec{Path: "/etc/motd", Content: "hello\n"},
						&drivers.FileSpec{Path: "/srv/app/app.conf", Content: "x=1\n", Mode: mode(0o640), Owner: "app", Group: "app"},
					},
					Changed: func(spec drivers.Spec) drivers.Spec {
						s := *spec.(*drivers.FileSpec)
						c.change(&s)
						return &s
					},
					Snapshot: func(t *testing.T) string { return driverstest.Tree(t, r.Dir()) },
				}
			})
		})
	}
}

// TestAtomicRewrite: a reader never sees anything but one whole content
// while the file is rewritten between two contents of different lengths.
func TestAtomicRewrite(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	contents := []string{"short\n", strings.Repeat("a much longer line of content\n", 8192)}
	spec := func(i int) drivers.Spec { return &drivers.FileSpec{Path: "/etc/motd", Content: contents[i%2]} }
	if _, err := d.Apply(t.Context(), spec(0)); err != nil {
		t.Fatal(err)
	}

	var (
		stop  atomic.Bool
		reads atomic.Int64
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		for !stop.Load() {
			b, err := os.ReadFile(r.Host("/etc/motd"))
			if err != nil {
				t.Errorf("read while rewriting: %v", err)
				return
			}
			if s := string(b); s != contents[0] && s != contents[1] {
				t.Errorf("read while rewriting: got %d bytes, want %d or %d: a partial file", len(s), len(contents[0]), len(contents[1]))
				return
			}
			reads.Add(1)
		}
	})
	for i := 1; i <= 100; i++ {
		got, err := d.Apply(t.Context(), spec(i))
		if err != nil || got != drivers.Updated {
			t.Errorf("Apply #%d: got %q, %v; want %q", i, got, err, drivers.Updated)
		}
	}
	stop.Store(true)
	wg.Wait()
	if reads.Load() == 0 {
		t.Error("the reader read nothing while the file was rewritten")
	}
}

// TestSymlinkAtPath: a symlink planted at the path, pointing outside the
// root, is reported as a type difference, replaced by Apply without its
// target being touched, and left in place by Remove.
func TestSymlinkAtPath(t *testing.T) {
	outside := t.TempDir()
	target := filepath.Join(outside, "target")
	if err := os.WriteFile(target, []byte("outside\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		target string
	}{
		{"to a file outside", target},
		{"to a directory outside", outside},
		{"dangling", filepath.Join(outside, "missing")},
		{"relative", "../../" + strings.TrimPrefix(target, "/")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := file.New(r)
			spec := &drivers.FileSpec{Path: "/etc/motd", Content: "inside\n", Mode: mode(0o644)}
			link := r.Host(spec.Path)
			if err := os.Symlink(tt.target, link); err != nil {
				t.Fatal(err)
			}
			outsideBefore := driverstest.Tree(t, outside)

			obs, err := d.Observe(t.Context(), spec)
			if err != nil {
				t.Fatalf("Observe: %v", err)
			}
			if !obs.Exists || obs.InSync || !slices.Equal(obs.Differs, []string{"type"}) || obs.Seen != "type:symlink" {
				t.Errorf("Observe: got %+v, want Exists, not InSync, Differs [type], Seen type:symlink", obs)
			}

			if err := d.Remove(t.Context(), spec); !errors.Is(err, file.ErrNotRegular) || !strings.Contains(err.Error(), "symlink") {
				t.Errorf("Remove: got %v, want an error wrapping ErrNotRegular that says a symlink is there", err)
			}
			if st := lstat(t, link); st.Mode&unix.S_IFMT != unix.S_IFLNK {
				t.Errorf("after Remove: got mode %o at the path, want the symlink left", st.Mode)
			}

			got, err := d.Apply(t.Context(), spec)
			if err != nil || got != drivers.Updated {
				t.Fatalf("Apply: got %q, %v; want %q", got, err, drivers.Updated)
			}
			if st := lstat(t, link); st.Mode&unix.S_IFMT != unix.S_IFREG {
				t.Errorf("after Apply: got mode %o at the path, want a regular file", st.Mode)
			}
			if got := readHost(t, link); got != spec.Content {
				t.Errorf("after Apply: content %q, want %q", got, spec.Content)
			}
			if after := driverstest.Tree(t, outside); after != outsideBefore {
				t.Errorf("the symlink's target changed:\n got: %s\nwant: %s", after, outsideBefore)
			}
		})
	}
}

// TestSymlinkParent: a symlink where a parent directory should be is
// refused by every call, and nothing is read or written through it.
func TestSymlinkParent(t *testing.T) {
	tests := []struct {
		name string
		link string // host path of the symlink, relative to the root
		path string
	}{
		{"top", "srv/elsewhere", "/srv/elsewhere/existing"},
		{"middle", "srv/app/conf.d", "/srv/app/conf.d/existing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := file.New(r)
			outside := t.TempDir()
			if err := os.WriteFile(filepath.Join(outside, "existing"), []byte("outside\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(r.Dir(), tt.link)); err != nil {
				t.Fatal(err)
			}
			before := driverstest.Tree(t, outside)
			spec := &drivers.FileSpec{Path: tt.path, Content: "inside\n"}

			if _, err := d.Observe(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) {
				t.Errorf("Observe: got %v, want an error wrapping ErrUnsafePath", err)
			}
			if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) {
				t.Errorf("Apply: got %v, want an error wrapping ErrUnsafePath", err)
			}
			if p, err := d.Stage(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) || p != nil {
				t.Errorf("Stage: got %v, %v; want nil and an error wrapping ErrUnsafePath", p, err)
			}
			if err := d.Remove(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) {
				t.Errorf("Remove: got %v, want an error wrapping ErrUnsafePath", err)
			}
			if after := driverstest.Tree(t, outside); after != before {
				t.Errorf("outside the root changed:\n got: %s\nwant: %s", after, before)
			}
		})
	}
}

// TestOwnerAndMode: owners resolve in the root's own etc/passwd and
// etc/group, and the setuid, setgid and sticky bits survive a write and a
// change of owner.
func TestOwnerAndMode(t *testing.T) {
	tests := []struct {
		name         string
		spec         drivers.FileSpec
		wantMode     drivers.Mode
		wantUID, GID uint32
	}{
		{"defaults", drivers.FileSpec{}, 0o644, 0, 0},
		{"owner and group", drivers.FileSpec{Owner: "app", Group: "app"}, 0o644, 1234, 1234},
		{"owner only", drivers.FileSpec{Owner: "app"}, 0o644, 1234, 0},
		{"group only", drivers.FileSpec{Group: "staff", Mode: mode(0o640)}, 0o640, 0, 50},
		{"setuid", drivers.FileSpec{Mode: mode(0o4755), SpecialBits: true}, 0o4755, 0, 0},
		{"setuid with owner", drivers.FileSpec{Mode: mode(0o4755), Owner: "app", SpecialBits: true}, 0o4755, 1234, 0},
		{"setgid with group", drivers.FileSpec{Mode: mode(0o2750), Group: "staff", SpecialBits: true}, 0o2750, 0, 50},
		{"sticky", drivers.FileSpec{Mode: mode(0o1600), SpecialBits: true}, 0o1600, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := file.New(r)
			spec := tt.spec
			spec.Path, spec.Content = "/srv/app/bin", "#!/bin/sh\n"
			check := func(when string) {
				t.Helper()
				st := lstat(t, r.Host(spec.Path))
				if got := drivers.Mode(st.Mode & 0o7777); got != tt.wantMode {
					t.Errorf("%s: mode %s, want %s", when, got, tt.wantMode)
				}
				if st.Uid != tt.wantUID || st.Gid != tt.GID {
					t.Errorf("%s: owner %d:%d, want %d:%d", when, st.Uid, st.Gid, tt.wantUID, tt.GID)
				}
				obs, err := d.Observe(t.Context(), &spec)
				if err != nil || !obs.InSync {
					t.Errorf("%s: Observe got %+v, %v; want InSync", when, obs, err)
				}
			}

			if got, err := d.Apply(t.Context(), &spec); err != nil || got != drivers.Created {
				t.Fatalf("Apply: got %q, %v; want %q", got, err, drivers.Created)
			}
			check("after create")

			// From another owner and mode, back by chown alone: the
			// inode stays, and chown's clearing of setuid is undone.
			if err := os.Chown(r.Host(spec.Path), 4242, 4242); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(r.Host(spec.Path), 0o600); err != nil {
				t.Fatal(err)
			}
			ino := lstat(t, r.Host(spec.Path)).Ino
			obs, err := d.Observe(t.Context(), &spec)
			if want := []string{"mode", "owner", "group"}; err != nil || !slices.Equal(obs.Differs, want) {
				t.Errorf("Observe after chown: got %+v, %v; want Differs %q", obs, err, want)
			}
			if got, err := d.Apply(t.Context(), &spec); err != nil || got != drivers.Updated {
				t.Fatalf("Apply after chown: got %q, %v; want %q", got, err, drivers.Updated)
			}
			check("after a change of owner")
			if got := lstat(t, r.Host(spec.Path)).Ino; got != ino {
				t.Errorf("inode %d after a mode and owner change, want %d: the file was rewritten", got, ino)
			}
		})
	}
}

func TestUnknownOwner(t *testing.T) {
	tests := []struct {
		name    string
		spec    drivers.FileSpec
		errHas  []string
		wantErr error
	}{
		{"owner", drivers.FileSpec{Owner: "ghost"}, []string{`"ghost"`, "/etc/passwd"}, drivers.ErrInvalidSpec},
		{"group", drivers.FileSpec{Group: "ghosts"}, []string{`"ghosts"`, "/etc/group"}, drivers.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := file.New(r)
			spec := tt.spec
			spec.Path, spec.Content = "/etc/motd", "hello\n"
			_, err := d.Apply(t.Context(), &spec)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply: got %v, want an error wrapping %v", err, tt.wantErr)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Apply: error %q does not say %s", err, s)
				}
			}
			if _, err := os.Lstat(r.Host(spec.Path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a failed Apply: Lstat got %v, want nothing written", err)
			}
			// Observing an absent file needs no owner.
			if obs, err := d.Observe(t.Context(), &spec); err != nil || obs.Exists {
				t.Errorf("Observe: got %+v, %v; want absent", obs, err)
			}
		})
	}
}

func TestObserveDiffers(t *testing.T) {
	const content = "x=1\n"
	tests := []struct {
		name string
		spec drivers.FileSpec
		want []string
	}{
		{"in sync", drivers.FileSpec{Content: content, Mode: mode(0o640), Owner: "app", Group: "staff"}, nil},
		{"content", drivers.FileSpec{Content: "x=2\n", Mode: mode(0o640), Owner: "app", Group: "staff"}, []string{"content"}},
		{"mode", drivers.FileSpec{Content: content, Owner: "app", Group: "staff"}, []string{"mode"}},
		{"owner and group", drivers.FileSpec{Content: content, Mode: mode(0o640)}, []string{"owner", "group"}},
		{"everything", drivers.FileSpec{}, []string{"content", "mode", "owner", "group"}},
	}
	r := newRoot(t)
	d := file.New(r)
	if err := r.WriteFile("/srv/app/app.conf", []byte(content), rootfs.WriteOptions{Mode: 0o640, UID: 1234, GID: 50}); err != nil {
		t.Fatal(err)
	}
	wantSeen := fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(content)))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Path = "/srv/app/app.conf"
			obs, err := d.Observe(t.Context(), &spec)
			if err != nil {
				t.Fatal(err)
			}
			if !obs.Exists || obs.InSync != (tt.want == nil) || !slices.Equal(obs.Differs, tt.want) || obs.Seen != wantSeen {
				t.Errorf("Observe: got %+v, want Exists, Differs %q, Seen %s", obs, tt.want, wantSeen)
			}
		})
	}
}

func TestNotAFileAtPath(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	if err := os.MkdirAll(r.Host("/etc/motd/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(r.Host("/etc/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path string
		kind string
	}{
		{"/etc/motd", "directory"},
		{"/etc/fifo", "fifo"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			spec := &drivers.FileSpec{Path: tt.path, Content: "hello\n"}
			before := driverstest.Tree(t, r.Dir())
			obs, err := d.Observe(t.Context(), spec)
			if err != nil || !obs.Exists || obs.InSync || !slices.Equal(obs.Differs, []string{"type"}) || obs.Seen != "type:"+tt.kind {
				t.Errorf("Observe: got %+v, %v; want Exists, Differs [type], Seen type:%s", obs, err, tt.kind)
			}
			if _, err := d.Apply(t.Context(), spec); !errors.Is(err, file.ErrNotRegular) || !strings.Contains(err.Error(), tt.kind) {
				t.Errorf("Apply: got %v, want an error wrapping ErrNotRegular that names a %s", err, tt.kind)
			}
			if err := d.Remove(t.Context(), spec); !errors.Is(err, file.ErrNotRegular) || !strings.Contains(err.Error(), tt.kind) {
				t.Errorf("Remove: got %v, want an error wrapping ErrNotRegular that names a %s", err, tt.kind)
			}
			if after := driverstest.Tree(t, r.Dir()); after != before {
				t.Errorf("the root changed:\n got: %s\nwant: %s", after, before)
			}
		})
	}
}

func TestMissingParent(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	spec := &drivers.FileSpec{Path: "/opt/tool/config", Content: "x\n"}
	obs, err := d.Observe(t.Context(), spec)
	if err != nil || obs.Exists || !slices.Equal(obs.Differs, []string{"absent"}) {
		t.Errorf("Observe: got %+v, %v; want absent", obs, err)
	}
	_, err = d.Apply(t.Context(), spec)
	if !errors.Is(err, file.ErrNoParent) || !strings.Contains(err.Error(), "declare the directory /opt/tool") {
		t.Errorf("Apply: got %v, want an error wrapping ErrNoParent that says to declare /opt/tool", err)
	}
	if p, err := d.Stage(t.Context(), spec); !errors.Is(err, file.ErrNoParent) || p != nil {
		t.Errorf("Stage: got %v, %v; want nil and an error wrapping ErrNoParent", p, err)
	}
	if _, err := os.Lstat(r.Host("/opt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(/opt): got %v, want no parent created", err)
	}
	if err := d.Remove(t.Context(), spec); err != nil {
		t.Errorf("Remove: got %v, want nil for a missing parent", err)
	}
}

func TestInvalidSpec(t *testing.T) {
	d := file.New(newRoot(t))
	tests := []struct {
		name string
		spec drivers.Spec
		want error
	}{
		{"relative", &drivers.FileSpec{Path: "etc/motd"}, drivers.ErrUnsafePath},
		{"dot dot", &drivers.FileSpec{Path: "/etc/../motd"}, drivers.ErrUnsafePath},
		{"root", &drivers.FileSpec{Path: "/"}, drivers.ErrUnsafePath},
		{"mode too large", &drivers.FileSpec{Path: "/etc/motd", Mode: mode(0o10644)}, drivers.ErrInvalidSpec},
		{"nil", (*drivers.FileSpec)(nil), drivers.ErrInvalidSpec},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := d.Observe(t.Context(), tt.spec); !errors.Is(err, tt.want) {
				t.Errorf("Observe: got %v, want an error wrapping %v", err, tt.want)
			}
			if _, err := d.Apply(t.Context(), tt.spec); !errors.Is(err, tt.want) {
				t.Errorf("Apply: got %v, want an error wrapping %v", err, tt.want)
			}
			if err := d.Remove(t.Context(), tt.spec); !errors.Is(err, tt.want) {
				t.Errorf("Remove: got %v, want an error wrapping %v", err, tt.want)
			}
		})
	}
}

// TestStageBatch is the reconciler's way: stage every file, sync the
// filesystem once, commit them all, sync once more.
func TestStageBatch(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	if err := r.WriteFile("/etc/hosts", []byte("old\n"), rootfs.WriteOptions{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFile("/etc/same", []byte("same\n"), rootfs.WriteOptions{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	specs := []*drivers.FileSpec{
		{Path: "/etc/motd", Content: "hello\n"},
		{Path: "/etc/hosts", Content: "new\n"},
		{Path: "/etc/same", Content: "same\n", Mode: mode(0o600)},
		{Path: "/srv/app/app.conf", Content: "x=1\n", Owner: "app"},
	}
	wantActions := []drivers.Action{drivers.Created, drivers.Updated, drivers.Updated, drivers.Created}
	before := driverstest.Tree(t, r.Dir())
	var pending []drivers.Pending
	for _, s := range specs {
		p, err := d.Stage(t.Context(), s)
		if err != nil || p == nil {
			t.Fatalf("Stage(%s): got %v, %v; want a Pending", s.Path, p, err)
		}
		pending = append(pending, p)
	}
	if got := readHost(t, r.Host("/etc/hosts")); got != "old\n" {
		t.Errorf("/etc/hosts before Commit: got %q, want %q", got, "old\n")
	}
	if err := r.SyncFS(); err != nil {
		t.Fatal(err)
	}
	for i, p := range pending {
		got, err := p.Commit()
		if err != nil || got != wantActions[i] {
			t.Errorf("Commit(%s): got %q, %v; want %q", specs[i].Path, got, err, wantActions[i])
		}
		p.Abort() // after Commit: nothing
	}
	if err := r.SyncFS(); err != nil {
		t.Fatal(err)
	}
	for _, s := range specs {
		if obs, err := d.Observe(t.Context(), s); err != nil || !obs.InSync {
			t.Errorf("Observe(%s) after Commit: got %+v, %v; want InSync", s.Path, obs, err)
		}
	}
	after := driverstest.Tree(t, r.Dir())
	if after == before || strings.Contains(after, ".mesh-host-") {
		t.Errorf("root after Commit:\n%s\nwant every file in place and no temporary file", after)
	}

	// Staged then aborted: nothing is left beside the files.
	p, err := d.Stage(t.Context(), &drivers.FileSpec{Path: "/etc/motd", Content: "other\n"})
	if err != nil || p == nil {
		t.Fatalf("Stage: got %v, %v; want a Pending", p, err)
	}
	p.Abort()
	if got, err := p.Commit(); err != nil || got != drivers.Unchanged {
		t.Errorf("Commit after Abort: got %q, %v; want %q and nothing done", got, err, drivers.Unchanged)
	}
	if again := driverstest.Tree(t, r.Dir()); again != after {
		t.Errorf("Stage then Abort changed the root:\n got: %s\nwant: %s", again, after)
	}
	if b, _ := os.ReadFile(r.Host("/etc/motd")); !bytes.Equal(b, []byte("hello\n")) {
		t.Errorf("/etc/motd after Abort: got %q, want %q", b, "hello\n")
	}
}

// TestSecretContent: a secret's value is written as the file's content, and
// the file is reported by a keyed digest only, so that no drift record
// holds a plain hash of the value; a secret not opened is refused.
func TestSecretContent(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	ctx := t.Context()
	sec := &drivers.Secret{Name: "db-password", Sealed: "x", Sender: "X"}
	spec := &drivers.FileSpec{Path: "/srv/app/db.pass", Mode: mode(0o600), Secret: sec}
	if _, err := d.Apply(ctx, spec); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "not opened") {
		t.Fatalf("an unopened secret: %v", err)
	}
	key := bytes.Repeat([]byte{7}, 32)
	sec.Provide([]byte("hunter2"), key)
	if a, err := d.Apply(ctx, spec); err != nil || a != drivers.Created {
		t.Fatalf("Apply = %v, %v", a, err)
	}
	if got := readHost(t, filepath.Join(r.Dir(), "srv/app/db.pass")); got != "hunter2" {
		t.Fatalf("content %q", got)
	}
	if o, err := d.Observe(ctx, spec); err != nil || !o.InSync {
		t.Fatalf("Observe after apply = %+v, %v", o, err)
	}
	// Only the mode drifts: the content is still the secret, and what is
	// reported of it must not be its plain digest.
	if err := os.Chmod(filepath.Join(r.Dir(), "srv/app/db.pass"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := d.Observe(ctx, spec)
	plain := fmt.Sprintf("%x", sha256.Sum256([]byte("hunter2")))
	if err != nil || o.InSync || !strings.HasPrefix(o.Seen, "hmac-sha256:") || strings.Contains(o.Seen, plain) {
		t.Fatalf("Observe of a drifted mode = %+v, %v", o, err)
	}
	other := &drivers.Secret{Name: "db-password"}
	other.Provide([]byte("hunter2"), bytes.Repeat([]byte{8}, 32))
	o2, _ := d.Observe(ctx, &drivers.FileSpec{Path: "/srv/app/db.pass", Mode: mode(0o600), Secret: other})
	if o2.Seen == o.Seen {
		t.Error("two nodes' digest keys give the same digest")
	}
	both := &drivers.FileSpec{Path: "/srv/app/db.pass", Content: "x", Secret: sec}
	if _, err := d.Apply(ctx, both); !errors.Is(err, drivers.ErrInvalidSpec) {
		t.Errorf("content and secret both: %v", err)
	}
}

// TestSpecialBitsOnlyWhenSaid: a mode with setuid, setgid or sticky is
// refused unless the spec says special_bits, and nothing is written.
func TestSpecialBitsOnlyWhenSaid(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	for _, m := range []drivers.Mode{0o4755, 0o2755, 0o1644, 0o6777} {
		spec := &drivers.FileSpec{Path: "/srv/app/su", Content: "#!/bin/sh\n", Mode: mode(m)}
		if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "special_bits") {
			t.Errorf("mode %s: Apply = %v, want refused naming special_bits", m, err)
		}
		if _, err := os.Lstat(r.Host(spec.Path)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("mode %s: the file was written: %v", m, err)
		}
	}
}

// TestHardLinkIsNotChangedInPlace: a file whose inode another path also
// names (a hard link from outside the root, say to a file of the
// machine's) gets a new inode of its own when only its mode or owner
// differ; the other path keeps its mode, owner and content.
func TestHardLinkIsNotChangedInPlace(t *testing.T) {
	r := newRoot(t)
	d := file.New(r)
	outside := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(outside, []byte("root:secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	target := r.Host("/srv/app/linked")
	if err := os.Link(outside, target); err != nil {
		t.Skipf("cannot make a hard link across these directories: %v", err)
	}
	// The content is what the file holds already: only the mode differs,
	// which a chmod in place would apply to the outside file too.
	spec := &drivers.FileSpec{Path: "/srv/app/linked", Content: "root:secret\n", Mode: mode(0o644)}
	if a, err := d.Apply(t.Context(), spec); err != nil || a != drivers.Updated {
		t.Fatalf("Apply = %v, %v", a, err)
	}
	if st := lstat(t, outside); st.Mode&0o7777 != 0o600 || st.Nlink != 1 {
		t.Errorf("the outside file: mode %o, links %d; want 600, 1", st.Mode&0o7777, st.Nlink)
	}
	if st := lstat(t, target); st.Mode&0o7777 != 0o644 || st.Nlink != 1 {
		t.Errorf("the managed file: mode %o, links %d; want 644 and an inode of its own", st.Mode&0o7777, st.Nlink)
	}
	if got := readHost(t, outside); got != "root:secret\n" {
		t.Errorf("the outside file's content: %q", got)
	}
}
