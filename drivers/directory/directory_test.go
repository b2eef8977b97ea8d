package directory_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/directory"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// newRoot is driverstest.NewRoot with the directories these tests use.
func newRoot(t *testing.T) *rootfs.Root { return driverstest.NewRoot(t, "srv") }

func mode(m drivers.Mode) *drivers.Mode { return &m }

func lstat(t *testing.T, name string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(name, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func TestConformance(t *testing.T) {
	changes := []struct {
		name   string
		change func(s *drivers.DirectorySpec)
	}{
		{"mode", func(s *drivers.DirectorySpec) { s.Mode = mode(0o2770); s.SpecialBits = true }},
		{"owner and group", func(s *drivers.DirectorySpec) { s.Owner = "app"; s.Group = "staff" }},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
				r := newRoot(t)
				return driverstest.Fixture{
					Driver: directory.New(r),
					Specs: []drivers.Spec{
						&drivers.DirectorySpec{Path: "/srv/www"},
						&drivers.DirectorySpec{Path: "/etc/app.d", Mode: mode(0o750), Owner: "root", Group: "app"},
					},
					Changed: func(spec drivers.Spec) drivers.Spec {
						s := *spec.(*drivers.DirectorySpec)
						c.change(&s)
						return &s
					},
					Snapshot: func(t *testing.T) string { return driverstest.Tree(t, r.Dir()) },
				}
			})
		})
	}
}

// A mode with setuid, setgid or the sticky bit is refused unless the
// spec says special_bits, as a file's is: nothing is made.
func TestSpecialBitsNeedSaying(t *testing.T) {
	for _, m := range []drivers.Mode{0o7777, 0o4755, 0o2775, 0o1777} {
		r := newRoot(t)
		d := directory.New(r)
		spec := &drivers.DirectorySpec{Path: "/srv/shared", Mode: mode(m)}
		if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "special_bits: true") {
			t.Errorf("mode %04o without special_bits: %v", uint32(m), err)
		}
		if _, err := os.Lstat(r.Host(spec.Path)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("mode %04o without special_bits: the directory was made (%v)", uint32(m), err)
		}
		if _, err := d.Observe(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("mode %04o without special_bits: observed (%v)", uint32(m), err)
		}
	}
}

func TestOwnerAndMode(t *testing.T) {
	tests := []struct {
		name     string
		spec     drivers.DirectorySpec
		wantMode drivers.Mode
		wantUID  uint32
		wantGID  uint32
	}{
		{"defaults", drivers.DirectorySpec{}, 0o755, 0, 0},
		{"owner and group", drivers.DirectorySpec{Owner: "app", Group: "app", Mode: mode(0o700)}, 0o700, 1234, 1234},
		{"setgid with group", drivers.DirectorySpec{Group: "staff", Mode: mode(0o2775), SpecialBits: true}, 0o2775, 0, 50},
		{"sticky", drivers.DirectorySpec{Mode: mode(0o1777), SpecialBits: true}, 0o1777, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := directory.New(r)
			spec := tt.spec
			spec.Path = "/srv/data"
			check := func(when string) {
				t.Helper()
				st := lstat(t, r.Host(spec.Path))
				if got := drivers.Mode(st.Mode & 0o7777); got != tt.wantMode || st.Mode&unix.S_IFMT != unix.S_IFDIR {
					t.Errorf("%s: mode %o, want a directory with mode %s", when, st.Mode, tt.wantMode)
				}
				if st.Uid != tt.wantUID || st.Gid != tt.wantGID {
					t.Errorf("%s: owner %d:%d, want %d:%d", when, st.Uid, st.Gid, tt.wantUID, tt.wantGID)
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

			if err := os.Chown(r.Host(spec.Path), 4242, 4242); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(r.Host(spec.Path), 0o711); err != nil {
				t.Fatal(err)
			}
			obs, err := d.Observe(t.Context(), &spec)
			if want := []string{"mode", "owner", "group"}; err != nil || !slices.Equal(obs.Differs, want) || obs.Seen != "dir:0711:4242:4242" {
				t.Errorf("Observe after chown: got %+v, %v; want Differs %q, Seen dir:0711:4242:4242", obs, err, want)
			}
			if got, err := d.Apply(t.Context(), &spec); err != nil || got != drivers.Updated {
				t.Fatalf("Apply after chown: got %q, %v; want %q", got, err, drivers.Updated)
			}
			check("after a change of owner")
		})
	}
}

func TestUnknownOwner(t *testing.T) {
	tests := []struct {
		name   string
		spec   drivers.DirectorySpec
		errHas []string
	}{
		{"owner", drivers.DirectorySpec{Owner: "ghost"}, []string{`"ghost"`, "/etc/passwd"}},
		{"group", drivers.DirectorySpec{Group: "ghosts"}, []string{`"ghosts"`, "/etc/group"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := directory.New(r)
			spec := tt.spec
			spec.Path = "/srv/data"
			_, err := d.Apply(t.Context(), &spec)
			if !errors.Is(err, drivers.ErrInvalidSpec) {
				t.Fatalf("Apply: got %v, want an error wrapping ErrInvalidSpec", err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Apply: error %q does not say %s", err, s)
				}
			}
			if _, err := os.Lstat(r.Host(spec.Path)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after a failed Apply: Lstat got %v, want nothing made", err)
			}
		})
	}
}

// TestForeignContentStays: a directory holding what the host does not own
// is not removed, and Remove says so.
func TestForeignContentStays(t *testing.T) {
	tests := []struct {
		name    string
		foreign func(t *testing.T, dir string)
	}{
		{"a file", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "foreign"), []byte("theirs\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"an empty directory", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"a dangling symlink", func(t *testing.T, dir string) {
			if err := os.Symlink("/nonexistent", filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := directory.New(r)
			spec := &drivers.DirectorySpec{Path: "/srv/data"}
			if _, err := d.Apply(t.Context(), spec); err != nil {
				t.Fatal(err)
			}
			tt.foreign(t, r.Host(spec.Path))
			before := driverstest.Tree(t, r.Dir())
			err := d.Remove(t.Context(), spec)
			if !errors.Is(err, directory.ErrNotEmpty) || !errors.Is(err, unix.ENOTEMPTY) || !errors.Is(err, drivers.ErrLeftInPlace) {
				t.Errorf("Remove: got %v, want an error wrapping ErrNotEmpty, ENOTEMPTY and ErrLeftInPlace", err)
			}
			if err != nil && !strings.Contains(err.Error(), "does not own") {
				t.Errorf("Remove: error %q does not say the host does not own what is in it", err)
			}
			if after := driverstest.Tree(t, r.Dir()); after != before {
				t.Errorf("Remove changed the root:\n got: %s\nwant: %s", after, before)
			}
			if obs, err := d.Observe(t.Context(), spec); err != nil || !obs.InSync {
				t.Errorf("Observe after Remove: got %+v, %v; want the directory still InSync", obs, err)
			}
		})
	}
}

// TestNotADirectoryAtPath: a file or a symlink (even to a directory) at
// the path is a type difference, neither replaced nor removed, and a
// symlink's target outside the root is untouched.
func TestNotADirectoryAtPath(t *testing.T) {
	tests := []struct {
		name  string
		kind  string
		plant func(t *testing.T, at, outside string)
	}{
		{"file", "file", func(t *testing.T, at, _ string) {
			if err := os.WriteFile(at, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to a directory outside", "symlink", func(t *testing.T, at, outside string) {
			if err := os.Symlink(outside, at); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRoot(t)
			d := directory.New(r)
			outside := t.TempDir()
			if err := os.Chmod(outside, 0o700); err != nil {
				t.Fatal(err)
			}
			spec := &drivers.DirectorySpec{Path: "/srv/data", Mode: mode(0o755), Owner: "app"}
			tt.plant(t, r.Host(spec.Path), outside)
			rootBefore, outsideBefore := driverstest.Tree(t, r.Dir()), driverstest.Tree(t, outside)

			obs, err := d.Observe(t.Context(), spec)
			if err != nil || !obs.Exists || obs.InSync || !slices.Equal(obs.Differs, []string{"type"}) || obs.Seen != "type:"+tt.kind {
				t.Errorf("Observe: got %+v, %v; want Exists, Differs [type], Seen type:%s", obs, err, tt.kind)
			}
			if _, err := d.Apply(t.Context(), spec); !errors.Is(err, directory.ErrNotDirectory) || !strings.Contains(err.Error(), tt.kind) {
				t.Errorf("Apply: got %v, want an error wrapping ErrNotDirectory that names a %s", err, tt.kind)
			}
			if err := d.Remove(t.Context(), spec); !errors.Is(err, directory.ErrNotDirectory) || !strings.Contains(err.Error(), tt.kind) {
				t.Errorf("Remove: got %v, want an error wrapping ErrNotDirectory that names a %s", err, tt.kind)
			}
			if after := driverstest.Tree(t, r.Dir()); after != rootBefore {
				t.Errorf("the root changed:\n got: %s\nwant: %s", after, rootBefore)
			}
			if after := driverstest.Tree(t, outside); after != outsideBefore {
				t.Errorf("outside the root changed:\n got: %s\nwant: %s", after, outsideBefore)
			}
		})
	}
}

func TestSymlinkParent(t *testing.T) {
	r := newRoot(t)
	d := directory.New(r)
	outside := t.TempDir()
	if err := os.Mkdir(filepath.Join(outside, "existing"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, r.Host("/srv/elsewhere")); err != nil {
		t.Fatal(err)
	}
	before := driverstest.Tree(t, outside)
	for _, p := range []string{"/srv/elsewhere/new", "/srv/elsewhere/existing"} {
		spec := &drivers.DirectorySpec{Path: p, Mode: mode(0o700)}
		if _, err := d.Observe(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("Observe(%s): got %v, want an error wrapping ErrUnsafePath", p, err)
		}
		if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("Apply(%s): got %v, want an error wrapping ErrUnsafePath", p, err)
		}
		if err := d.Remove(t.Context(), spec); !errors.Is(err, drivers.ErrUnsafePath) {
			t.Errorf("Remove(%s): got %v, want an error wrapping ErrUnsafePath", p, err)
		}
	}
	if after := driverstest.Tree(t, outside); after != before {
		t.Errorf("outside the root changed:\n got: %s\nwant: %s", after, before)
	}
}

func TestMissingParent(t *testing.T) {
	r := newRoot(t)
	d := directory.New(r)
	spec := &drivers.DirectorySpec{Path: "/opt/tool/data"}
	obs, err := d.Observe(t.Context(), spec)
	if err != nil || obs.Exists || !slices.Equal(obs.Differs, []string{"absent"}) {
		t.Errorf("Observe: got %+v, %v; want absent", obs, err)
	}
	_, err = d.Apply(t.Context(), spec)
	if !errors.Is(err, directory.ErrNoParent) || !strings.Contains(err.Error(), "declare the directory /opt/tool") {
		t.Errorf("Apply: got %v, want an error wrapping ErrNoParent that says to declare /opt/tool", err)
	}
	if _, err := os.Lstat(r.Host("/opt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Lstat(/opt): got %v, want no parent created", err)
	}
	if err := d.Remove(t.Context(), spec); err != nil {
		t.Errorf("Remove: got %v, want nil for a missing parent", err)
	}
}

func TestInvalidSpec(t *testing.T) {
	d := directory.New(newRoot(t))
	tests := []struct {
		name string
		spec drivers.Spec
		want error
	}{
		{"relative", &drivers.DirectorySpec{Path: "srv"}, drivers.ErrUnsafePath},
		{"trailing slash", &drivers.DirectorySpec{Path: "/srv/"}, drivers.ErrUnsafePath},
		{"root", &drivers.DirectorySpec{Path: "/"}, drivers.ErrUnsafePath},
		{"mode too large", &drivers.DirectorySpec{Path: "/srv/x", Mode: mode(0o17777)}, drivers.ErrInvalidSpec},
		{"nil", (*drivers.DirectorySpec)(nil), drivers.ErrInvalidSpec},
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
