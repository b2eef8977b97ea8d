package driverstest_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
)

// memDriver keeps files in a map; broken names one way it misbehaves, so
// the suite can be shown to catch it.
type memDriver struct {
	mu     sync.Mutex
	files  map[string]string
	broken string
}

var (
	_ drivers.Driver = (*memDriver)(nil)
	_ drivers.Stager = (*memDriver)(nil)
)

func (d *memDriver) spec(ctx context.Context, spec drivers.Spec) (*drivers.FileSpec, error) {
	if d.broken == "slow after cancel" && ctx.Err() != nil {
		time.Sleep(3 * time.Second)
	}
	if err := ctx.Err(); err != nil && d.broken != "ignores cancel" && d.broken != "slow after cancel" {
		return nil, err
	}
	s, ok := spec.(*drivers.FileSpec)
	if !ok && d.broken != "accepts other kinds" {
		return nil, fmt.Errorf("%w: %T", drivers.ErrWrongKind, spec)
	}
	if !ok {
		return &drivers.FileSpec{Path: spec.Key()}, nil
	}
	return s, nil
}

func (d *memDriver) Observe(ctx context.Context, spec drivers.Spec) (drivers.Observation, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Observation{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.broken == "observe writes" {
		d.files["/observed"] = "yes"
	}
	content, ok := d.files[s.Path]
	switch {
	case !ok && d.broken == "absent not said":
		return drivers.Observation{}, nil
	case !ok:
		return drivers.Observation{Differs: []string{"absent"}}, nil
	case content != s.Content:
		return drivers.Observation{Exists: true, Differs: []string{"content"}, Seen: content}, nil
	}
	return drivers.Observation{Exists: true, InSync: true, Seen: content}, nil
}

func (d *memDriver) Apply(ctx context.Context, spec drivers.Spec) (drivers.Action, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return drivers.Unchanged, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.apply(s), nil
}

func (d *memDriver) apply(s *drivers.FileSpec) drivers.Action {
	content, ok := d.files[s.Path]
	switch {
	case !ok:
		d.files[s.Path] = s.Content
		return drivers.Created
	case content != s.Content || d.broken == "apply always updates":
		d.files[s.Path] = s.Content
		return drivers.Updated
	}
	return drivers.Unchanged
}

func (d *memDriver) Remove(ctx context.Context, spec drivers.Spec) error {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.files[s.Path]; !ok && d.broken == "remove of absent fails" {
		return fmt.Errorf("%s: no such file", s.Path)
	}
	delete(d.files, s.Path)
	return nil
}

func (d *memDriver) Stage(ctx context.Context, spec drivers.Spec) (drivers.Pending, error) {
	s, err := d.spec(ctx, spec)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if content, ok := d.files[s.Path]; ok && content == s.Content && d.broken != "stage of in-sync is not nil" {
		return nil, nil
	}
	if d.broken == "stage is visible" {
		d.apply(s)
	}
	return &memPending{d: d, spec: s}, nil
}

type memPending struct {
	d    *memDriver
	spec *drivers.FileSpec
}

func (p *memPending) Commit() (drivers.Action, error) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	if p.d.broken == "commit does nothing" {
		return drivers.Created, nil
	}
	return p.d.apply(p.spec), nil
}

func (p *memPending) Abort() {}

func (d *memDriver) snapshot(*testing.T) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(d.files)) {
		fmt.Fprintf(&b, "%s=%q\n", k, d.files[k])
	}
	return b.String()
}

func memFixture(broken string) func(t *testing.T) driverstest.Fixture {
	return func(t *testing.T) driverstest.Fixture {
		d := &memDriver{files: map[string]string{}, broken: broken}
		return driverstest.Fixture{
			Driver: d,
			Specs: []drivers.Spec{
				&drivers.FileSpec{Path: "/a", Content: "a"},
				&drivers.FileSpec{Path: "/b", Content: "b"},
			},
			Changed: func(spec drivers.Spec) drivers.Spec {
				s := *spec.(*drivers.FileSpec)
				s.Content += " changed"
				return &s
			},
			Snapshot: d.snapshot,
		}
	}
}

func TestCorrectDriverPasses(t *testing.T) {
	driverstest.Run(t, memFixture(""))
}

// TestNilChanged: a kind with no update passes with those steps skipped.
func TestNilChanged(t *testing.T) {
	driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
		f := memFixture("")(t)
		f.Changed = nil
		return f
	})
}

const brokenEnv = "DRIVERSTEST_BROKEN"

// TestBrokenDriversFail runs the suite over each broken driver in a child
// process and checks that it fails, saying why.
func TestBrokenDriversFail(t *testing.T) {
	if broken := os.Getenv(brokenEnv); broken != "" {
		driverstest.Run(t, memFixture(broken))
		return
	}
	tests := []struct {
		broken string
		want   string
	}{
		{"observe writes", "changed the snapshot"},
		{"absent not said", `want absent`},
		{"apply always updates", `got "updated", want "unchanged"`},
		{"remove of absent fails", "Remove(file:/a) with only its key: /a: no such file"},
		{"ignores cancel", "want one wrapping context.Canceled"},
		{"slow after cancel", "did not return within 2s"},
		{"accepts other kinds", "want one wrapping drivers.ErrWrongKind"},
		{"stage is visible", "want absent"},
		{"stage of in-sync is not nil", "Stage(in-sync file:/a) = *driverstest_test.memPending, want nil"},
		{"commit does nothing", "want Exists and InSync"},
	}
	for _, tt := range tests {
		t.Run(tt.broken, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenDriversFail$", "-test.count=1")
			cmd.Env = append(os.Environ(), brokenEnv+"="+tt.broken)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed a driver whose %s:\n%s", tt.broken, out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("the suite failed a driver whose %s without saying %q:\n%s", tt.broken, tt.want, out)
			}
		})
	}
}

func TestTree(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/f", []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("f", dir+"/l"); err != nil {
		t.Fatal(err)
	}
	before := driverstest.Tree(t, dir)
	if err := os.Chtimes(dir+"/f", time.Unix(0, 0), time.Unix(0, 0)); err != nil {
		t.Fatal(err)
	}
	if after := driverstest.Tree(t, dir); after != before {
		t.Errorf("Tree after a change of times:\n got: %s\nwant: %s", after, before)
	}
	for _, want := range []string{"f 0640 ", " file sha256:", "l 0777 ", " symlink sha256:", ". "} {
		if !strings.Contains(before, want) {
			t.Errorf("Tree = %q, want it to contain %q", before, want)
		}
	}
	if err := os.Chmod(dir+"/f", 0o600); err != nil {
		t.Fatal(err)
	}
	if after := driverstest.Tree(t, dir); after == before {
		t.Errorf("Tree after a change of mode is unchanged: %s", after)
	}
}
