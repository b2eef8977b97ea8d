package unit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/drivers/unit"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// fakeSystemctl is a systemctl that logs its arguments to $FAKE_LOG and
// keeps each unit's enablement in files under $FAKE_STATE. It stands in
// where the tests count what the driver asks of systemctl --root. The
// manager's side is not faked: the driver reaches it over D-Bus, and the
// TestLive tests hold it to a real systemd.
const fakeSystemctl = `#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_LOG"
case "$1" in --root=*) shift;; esac
verb=$1; shift
[ "$1" = "--" ] && shift
state="$FAKE_STATE/$1"
case "$verb" in
is-enabled) s=$(/bin/cat "$state.enabled" 2>/dev/null || echo disabled); echo "$s"; [ "$s" = enabled ];;
enable) echo enabled > "$state.enabled";;
disable) echo disabled > "$state.enabled";;
*) echo "fake systemctl: unknown verb $verb" >&2; exit 1;;
esac
`

// fake is a driver on a temporary root with the fake systemctl, no
// manager, and a function returning the systemctl command lines it ran
// since it was last called, with the root written R.
func fake(t *testing.T) (*unit.Driver, *rootfs.Root, func() []string) {
	t.Helper()
	bin, state := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fakeSystemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "log")
	t.Setenv("PATH", bin)
	t.Setenv("FAKE_LOG", log)
	t.Setenv("FAKE_STATE", state)
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{ManagerRunning: func() bool { return false }})
	ran := func() []string {
		data, _ := os.ReadFile(log)
		os.Remove(log)
		s := strings.TrimSpace(strings.ReplaceAll(string(data), root.Dir(), "R"))
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	return d, root, ran
}

func wantRan(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s ran:\n  %s\nwant:\n  %s", what, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// TestSystemctlCalls: what Apply and Remove ask of systemctl --root: an
// enabled unit is disabled under its old file before new content, and
// enabled again after; an unchanged unit costs one is-enabled; Remove
// disables before it removes the file, and a second Remove asks nothing.
func TestSystemctlCalls(t *testing.T) {
	d, root, ran := fake(t)
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true, Active: true}

	apply(t, d, spec, drivers.Created)
	wantRan(t, "Apply of a new enabled unit", ran(),
		"--root=R enable -- mesh-hello.service",
		"--root=R is-enabled -- mesh-hello.service")

	apply(t, d, spec, drivers.Unchanged)
	wantRan(t, "Apply of an unchanged unit", ran(),
		"--root=R is-enabled -- mesh-hello.service")

	changed := *spec
	changed.Content = service("hello again", "multi-user.target")
	apply(t, d, &changed, drivers.Updated)
	wantRan(t, "Apply of new content", ran(),
		"--root=R is-enabled -- mesh-hello.service",
		"--root=R disable -- mesh-hello.service",
		"--root=R enable -- mesh-hello.service",
		"--root=R is-enabled -- mesh-hello.service")

	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: spec.Name}); err != nil {
		t.Fatal(err)
	}
	wantRan(t, "Remove", ran(), "--root=R disable -- mesh-hello.service")
	if _, err := os.Lstat(root.Host(unit.Dir + "/mesh-hello.service")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit file after Remove: %v, want it gone", err)
	}
	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: spec.Name}); err != nil {
		t.Fatal(err)
	}
	wantRan(t, "second Remove", ran())
}

// TestBatchWithoutManager: ApplyBatch returns each unit's result in the
// order given; one that fails does not stop the others.
func TestBatchWithoutManager(t *testing.T) {
	d, root, _ := fake(t)
	specs := []drivers.Spec{
		&drivers.UnitSpec{Name: "mesh-a.service", Content: service("a", "multi-user.target"), Enabled: true},
		&drivers.UnitSpec{Name: "mesh-missing.service", Enabled: true}, // no content, no file: not installed
		&drivers.FileSpec{Path: "/etc/motd"},
		&drivers.UnitSpec{Name: "mesh-b.service", Content: service("b", "multi-user.target")},
	}
	got := d.ApplyBatch(t.Context(), specs)
	if len(got) != len(specs) {
		t.Fatalf("ApplyBatch returned %d results for %d specs", len(got), len(specs))
	}
	want := []struct {
		action drivers.Action
		err    error
	}{{drivers.Created, nil}, {drivers.Unchanged, unit.ErrNotInstalled}, {drivers.Unchanged, drivers.ErrWrongKind}, {drivers.Created, nil}}
	for i, w := range want {
		if got[i].Action != w.action || !errors.Is(got[i].Err, w.err) || (w.err == nil) != (got[i].Err == nil) {
			t.Errorf("result %d (%s): got %q, %v; want %q, %v", i, drivers.ID(specs[i]), got[i].Action, got[i].Err, w.action, w.err)
		}
	}
	for _, name := range []string{"mesh-a.service", "mesh-b.service"} {
		if _, err := os.Stat(root.Host(unit.Dir + "/" + name)); err != nil {
			t.Errorf("%s after the batch: %v", name, err)
		}
	}
	if _, err := os.Lstat(root.Host(unit.Dir + "/mesh-missing.service")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a unit without content that is not installed: %v, want no file written for it", err)
	}
}

// TestManagerUnreachable: a driver told that a manager runs, where none
// answers, fails every call that needs one, saying where it looked.
func TestManagerUnreachable(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	if _, err := os.Stat("/run/systemd/private"); err == nil {
		t.Skip("a service manager answers on /run/systemd/private here")
	}
	d := unit.New(driverstest.OpenRoot(t, t.TempDir()), unit.Options{ManagerRunning: func() bool { return true }})
	defer d.Close()
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Active: true}
	_, errApply := d.Apply(t.Context(), spec) // writes the file, then asks the manager
	_, errObserve := d.Observe(t.Context(), spec)
	_, errRefresh := d.Refresh(t.Context(), spec, time.Now())
	_, errPackaged := d.Observe(t.Context(), &drivers.UnitSpec{Name: "mesh-packaged.service"})
	for _, err := range []error{errApply, errObserve, errRefresh, errPackaged} {
		if !errors.Is(err, unit.ErrManager) || !strings.Contains(err.Error(), "/run/systemd/private") {
			t.Errorf("got %v, want ErrManager saying where it looked", err)
		}
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestTimeoutKillsSystemctl: a systemctl that hangs is killed at
// Options.Timeout and the error says it timed out.
func TestTimeoutKillsSystemctl(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\nexec /bin/sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	d := unit.New(driverstest.OpenRoot(t, t.TempDir()), unit.Options{Timeout: 300 * time.Millisecond})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true}

	start := time.Now()
	_, err := d.Apply(t.Context(), spec)
	if !errors.Is(err, drivers.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("Apply with a hung systemctl: got %v, want drivers.ErrTimeout saying it timed out after 300ms", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Apply returned after %v, want soon after the 300ms timeout", took)
	}
}

// TestNoManager: where no manager runs, Refresh has nothing to do and
// says so, and Watch returns at once with ErrNoManager.
func TestNoManager(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	defer d.Close()
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Active: true}
	got, err := d.Refresh(t.Context(), spec, time.Now())
	want := drivers.Refreshed{Note: "no service manager runs in " + root.Dir() + ": nothing to refresh"}
	if err != nil || got != want {
		t.Errorf("Refresh without a manager = %+v, %v; want %+v", got, err, want)
	}
	bad := *spec
	bad.Refresh = "bounce"
	if _, err := d.Refresh(t.Context(), &bad, time.Now()); !errors.Is(err, drivers.ErrInvalidSpec) {
		t.Errorf("Refresh with refresh %q = %v, want ErrInvalidSpec", bad.Refresh, err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err = d.Watch(ctx, func(string) { t.Error("Watch without a manager told of a change") })
	if !errors.Is(err, unit.ErrNoManager) || ctx.Err() != nil {
		t.Errorf("Watch without a manager = %v (context: %v), want ErrNoManager at once", err, ctx.Err())
	}
}
