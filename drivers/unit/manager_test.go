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
	"github.com/mesh-host/mesh-host/drivers/unit"
)

// fakeSystemctl is a systemctl that talks to no manager: it logs its
// arguments to $FAKE_LOG and keeps each unit's enabled and active state in
// files under $FAKE_STATE.
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
is-active) s=$(/bin/cat "$state.active" 2>/dev/null || echo inactive); echo "$s"; [ "$s" = active ];;
start|restart) echo active > "$state.active";;
stop) echo inactive > "$state.active";;
daemon-reload) ;;
*) echo "fake systemctl: unknown verb $verb" >&2; exit 1;;
esac
`

// managed is a driver on a temporary root that a (fake) service manager
// runs, and a function returning the systemctl command lines it ran since
// it was last called, with the root written R.
func managed(t *testing.T) (*unit.Driver, *drivers.Root, func() []string) {
	t.Helper()
	bin, state := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte(fakeSystemctl), 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "log")
	t.Setenv("PATH", bin)
	t.Setenv("FAKE_LOG", log)
	t.Setenv("FAKE_STATE", state)
	root := newRoot(t)
	d := unit.New(root, unit.Options{ManagerRunning: func() bool { return true }})
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

// TestManagerRunning: with a service manager, Apply reloads it after a
// change, starts, restarts on new content and stops as the spec says, and
// Remove stops the unit before disabling it; activity is observed.
func TestManagerRunning(t *testing.T) {
	d, _, ran := managed(t)
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true, Active: true}

	apply(t, d, spec, drivers.Created)
	wantRan(t, "Apply of a new enabled, active unit", ran(),
		"--root=R enable -- mesh-hello.service",
		"--root=R is-enabled -- mesh-hello.service",
		"daemon-reload",
		"start -- mesh-hello.service")

	obs := observe(t, d, spec)
	if !obs.InSync || obs.Note != "" || !strings.HasSuffix(obs.Seen, " enabled active") {
		t.Errorf("Observe = %+v, want in sync, seen enabled and active, no note", obs)
	}
	if note := d.ApplyNote(spec); strings.Contains(note, "enablement only") {
		t.Errorf("ApplyNote with a manager = %q, want no enablement-only note", note)
	}
	ran()
	apply(t, d, spec, drivers.Unchanged)
	wantRan(t, "Apply of an unchanged unit", ran(),
		"--root=R is-enabled -- mesh-hello.service",
		"is-active -- mesh-hello.service")

	changed := *spec
	changed.Content = service("hello again", "multi-user.target")
	apply(t, d, &changed, drivers.Updated)
	wantRan(t, "Apply of new content", ran(),
		"--root=R is-enabled -- mesh-hello.service",
		"is-active -- mesh-hello.service",
		"--root=R disable -- mesh-hello.service",
		"--root=R enable -- mesh-hello.service",
		"--root=R is-enabled -- mesh-hello.service",
		"daemon-reload",
		"restart -- mesh-hello.service")

	stopped := changed
	stopped.Active = false
	if obs := observe(t, d, &stopped); strings.Join(obs.Differs, ",") != "active" {
		t.Errorf("Observe(inactive) of an active unit = %+v, want differs in active", obs)
	}
	ran()
	apply(t, d, &stopped, drivers.Updated)
	wantRan(t, "Apply of active false", ran(),
		"--root=R is-enabled -- mesh-hello.service",
		"is-active -- mesh-hello.service",
		"stop -- mesh-hello.service")

	apply(t, d, &changed, drivers.Updated)
	ran()
	if err := d.Remove(t.Context(), &changed); err != nil {
		t.Fatal(err)
	}
	wantRan(t, "Remove of an active unit", ran(),
		"is-active -- mesh-hello.service",
		"stop -- mesh-hello.service",
		"--root=R disable -- mesh-hello.service",
		"daemon-reload")
	if err := d.Remove(t.Context(), &changed); err != nil {
		t.Fatal(err)
	}
	wantRan(t, "second Remove", ran())
}

// TestTimeoutKillsSystemctl: a systemctl that hangs is killed at
// Options.Timeout and the error says it timed out.
func TestTimeoutKillsSystemctl(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "systemctl"), []byte("#!/bin/sh\nexec /bin/sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	d := unit.New(newRoot(t), unit.Options{Timeout: 300 * time.Millisecond})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true}

	start := time.Now()
	_, err := d.Apply(t.Context(), spec)
	if !errors.Is(err, unit.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 300ms") {
		t.Errorf("Apply with a hung systemctl: got %v, want ErrTimeout saying it timed out after 300ms", err)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Errorf("Apply returned after %v, want soon after the 300ms timeout", took)
	}
}
