package upgrade_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/upgrade"
)

// TestRetire: versions older than the predecessor go; running, the
// predecessor and anything newer than running stay, whatever the names.
func TestRetire(t *testing.T) {
	for _, tc := range []struct {
		name               string
		running, pred      string
		wantGone, wantKept []string
	}{
		{"predecessor", "v5", "v3", []string{"v1", "v2"}, []string{"v3", "v4", "v5", "v6"}},
		{"predecessor is the one before", "v5", "v4", []string{"v1", "v2", "v3"}, []string{"v4", "v5", "v6"}},
		{"no predecessor: the newest older than running", "v5", "", []string{"v1", "v2", "v3"}, []string{"v4", "v5", "v6"}},
		{"predecessor not on disk", "v5", "gone", []string{"v1", "v2", "v3"}, []string{"v4", "v5", "v6"}},
		{"predecessor is running", "v5", "v5", []string{"v1", "v2", "v3"}, []string{"v4", "v5", "v6"}},
		{"running is the oldest", "v1", "", nil, []string{"v1", "v2", "v3", "v4", "v5", "v6"}},
		{"predecessor newer than running", "v2", "v5", nil, []string{"v1", "v2", "v3", "v4", "v5", "v6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// Names that sort against the arrival order.
			order := map[string]string{"v1": "f", "v2": "e", "v3": "d", "v4": "c", "v5": "b", "v6": "a"}
			name := func(v string) string {
				if n, ok := order[v]; ok {
					return n
				}
				return v
			}
			for i, v := range []string{"v1", "v2", "v3", "v4", "v5", "v6"} {
				deliver(t, dir, name(v), uint64(i+1), "")
			}
			removed, err := upgrade.Retire(dir, name(tc.running), name(tc.pred))
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, v := range tc.wantGone {
				want = append(want, name(v))
			}
			wantNames(t, "removed", removed, want...)
			vs, _ := upgrade.List(dir)
			want = nil
			for _, v := range tc.wantKept {
				want = append(want, name(v))
			}
			wantNames(t, "left", vs, want...)
			entries, _ := os.ReadDir(dir)
			if len(entries) != len(tc.wantKept) {
				t.Errorf("%d entries left in the directory, want %d", len(entries), len(tc.wantKept))
			}
		})
	}
}

func TestRetireRunningNotAVersion(t *testing.T) {
	dir := t.TempDir()
	deliver(t, dir, "a", 1, "")
	if _, err := upgrade.Retire(dir, "nope", "a"); !errors.Is(err, upgrade.ErrNotVersion) {
		t.Fatalf("got %v, want ErrNotVersion", err)
	}
	if vs, _ := upgrade.List(dir); len(vs) != 1 {
		t.Fatal("removed something")
	}
}

// TestRetireNeverFollowsLinks: a symlink inside a retired version pointing
// out of the directory is removed as a link; its target stays.
func TestRetireNeverFollowsLinks(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	precious := filepath.Join(outside, "precious")
	writeFile(t, precious, "keep me")
	old := deliver(t, dir, "old", 1, "")
	if err := os.Symlink(outside, filepath.Join(old, "link-to-outside")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(precious, filepath.Join(old, "link-to-file")); err != nil {
		t.Fatal(err)
	}
	deliver(t, dir, "pred", 2, "")
	deliver(t, dir, "run", 3, "")
	removed, err := upgrade.Retire(dir, "run", "pred")
	if err != nil {
		t.Fatal(err)
	}
	wantNames(t, "removed", removed, "old")
	if got := readFile(t, precious); got != "keep me" {
		t.Fatalf("the link's target holds %q", got)
	}
}

// TestSweep: a directory renamed aside by an interrupted Retire is removed
// by the next Sweep, and was never a version meanwhile.
func TestSweep(t *testing.T) {
	dir := t.TempDir()
	deliver(t, dir, "a", 1, "")
	deliver(t, dir, "b", 2, "")
	if err := os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, upgrade.RetiringPrefix+"a")); err != nil {
		t.Fatal(err)
	}
	vs, _ := upgrade.List(dir)
	wantNames(t, "mid-retire", vs, "b")
	swept, err := upgrade.Sweep(dir)
	if err != nil || len(swept) != 1 || swept[0] != "a" {
		t.Fatalf("Sweep: got %v, %v; want [a]", swept, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, upgrade.RetiringPrefix+"a")); !os.IsNotExist(err) {
		t.Fatalf("leftover still there: %v", err)
	}
	if swept, err := upgrade.Sweep(filepath.Join(dir, "nowhere")); err != nil || swept != nil {
		t.Fatalf("Sweep of nothing: %v %v", swept, err)
	}
}
