package unit_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	godbus "github.com/godbus/dbus/v5"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/drivers/unit"
)

// The TestLive tests hold the driver to a real service manager: the
// driver on root "/", the manager that runs it, real units started and
// stopped. They run where testbeds/systemd puts them, in a container that
// boots systemd (as PID 1), with MESH_LIVE_MANAGER=1; anywhere else they
// skip. Their units are named mesh-live-*, and each test takes its own
// away when it ends.

// live is the driver on "/", or skips the test where no manager runs it or
// nobody asked for live tests.
func live(t *testing.T) *unit.Driver {
	t.Helper()
	if os.Getenv("MESH_LIVE_MANAGER") != "1" {
		t.Skip("live test: it starts and stops real units; set MESH_LIVE_MANAGER=1 where systemd runs / (testbeds/systemd's container)")
	}
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		t.Skip("live test: no service manager runs here (/run/systemd/system is missing)")
	}
	root, err := rootfs.Open("/")
	if err != nil {
		t.Fatal(err)
	}
	d := unit.New(root, unit.Options{
		Timeout: time.Minute,
		Redact:  func(s string) string { return strings.ReplaceAll(s, "opensesame", "[secret]") },
	})
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		root.Close()
	})
	return d
}

// forget takes the units away when the test ends: stopped, disabled, their
// files in /etc/systemd/system and the extra files removed, and the
// manager reloaded.
func forget(t *testing.T, names []string, files ...string) {
	t.Helper()
	t.Cleanup(func() {
		for _, n := range names {
			for _, verb := range []string{"unmask", "stop", "disable", "reset-failed"} {
				exec.Command("systemctl", verb, "--", n).Run()
			}
			os.Remove(filepath.Join(unit.Dir, n))
		}
		for _, f := range files {
			os.Remove(f)
		}
		exec.Command("systemctl", "daemon-reload").Run()
	})
}

// systemctl runs the real systemctl, which must succeed.
func systemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// show is one property of the unit, as systemctl show says it.
func show(t *testing.T, name, property string) string {
	t.Helper()
	return systemctl(t, "show", "--value", "-p", property, "--", name)
}

func wantState(t *testing.T, name, want string) {
	t.Helper()
	if got := show(t, name, "ActiveState"); got != want {
		t.Errorf("%s is %s, want %s", name, got, want)
	}
}

// reloadCounter counts the manager's reloads (daemon-reload): each
// announces itself with the signal Reloading(true), which the manager
// sends to every connection on its private socket before it reloads. The
// function returned says how many there were since it was last called.
func reloadCounter(t *testing.T) func() int {
	t.Helper()
	conn, err := unit.DialPrivate(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// A reload sends hundreds of signals (every unit it drops): room
	// enough that each is handed over in order, as it is read.
	signals := make(chan *godbus.Signal, 1<<16)
	conn.Signal(signals)
	manager := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	count := func() int {
		t.Helper()
		// The manager answers this call after it sent this connection
		// the signals of every reload it finished before: once it is
		// answered, they are all in signals.
		if err := manager.Call("org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
			t.Fatalf("ping the manager: %v", err)
		}
		n := 0
		for {
			select {
			case s := <-signals:
				if s.Name == "org.freedesktop.systemd1.Manager.Reloading" && len(s.Body) == 1 && s.Body[0] == true {
					n++
				}
			default:
				return n
			}
		}
	}
	count()
	return count
}

func wantReloads(t *testing.T, what string, count func() int, want int) {
	t.Helper()
	if got := count(); got != want {
		t.Errorf("%s reloaded the manager %d times, want %d", what, got, want)
	}
}

// sleeper is a service that runs until stopped.
func sleeper(description string) string {
	return "[Unit]\nDescription=" + description + "\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n"
}

// install lays a unit file down as a package would.
func install(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestLiveActiveHeld: a unit declared enabled and active runs; stopped by
// hand, Observe finds it not active and Apply starts it again, without a
// reload; active: false stops it.
func TestLiveActiveHeld(t *testing.T) {
	d := live(t)
	name := "mesh-live-held.service"
	forget(t, []string{name})
	reloads := reloadCounter(t)
	spec := &drivers.UnitSpec{Name: name, Content: sleeper("held"), Enabled: true, Active: true}

	apply(t, d, spec, drivers.Created)
	wantState(t, name, "active")
	if got := show(t, name, "UnitFileState"); got != "enabled" {
		t.Errorf("%s is %s, want enabled", name, got)
	}
	if obs := observe(t, d, spec); !obs.InSync || obs.Note != "" || !strings.HasSuffix(obs.Seen, " enabled active") {
		t.Errorf("Observe of the running unit = %+v, want in sync, seen enabled and active, no note", obs)
	}
	reloads()
	apply(t, d, spec, drivers.Unchanged)

	systemctl(t, "stop", name)
	if obs := observe(t, d, spec); obs.InSync || strings.Join(obs.Differs, ",") != "active" || !strings.HasSuffix(obs.Seen, " enabled inactive") {
		t.Errorf("Observe of the unit stopped by hand = %+v, want it differing in active", obs)
	}
	apply(t, d, spec, drivers.Updated)
	wantState(t, name, "active")
	wantReloads(t, "Apply of an unchanged unit and its repair", reloads, 0)

	stopped := *spec
	stopped.Active = false
	if obs := observe(t, d, &stopped); strings.Join(obs.Differs, ",") != "active" {
		t.Errorf("Observe(active: false) of the running unit = %+v, want it differing in active", obs)
	}
	apply(t, d, &stopped, drivers.Updated)
	wantState(t, name, "inactive")
	apply(t, d, &stopped, drivers.Unchanged)
}

// TestLiveContentChange: new content reloads the manager once and
// restarts the running unit, which then runs under its new definition.
func TestLiveContentChange(t *testing.T) {
	d := live(t)
	name := "mesh-live-changed.service"
	forget(t, []string{name})
	reloads := reloadCounter(t)
	spec := &drivers.UnitSpec{Name: name, Content: sleeper("before"), Enabled: true, Active: true}
	apply(t, d, spec, drivers.Created)
	pid := show(t, name, "MainPID")
	reloads()

	changed := *spec
	changed.Content = sleeper("after")
	if obs := observe(t, d, &changed); strings.Join(obs.Differs, ",") != "content" {
		t.Errorf("Observe(changed) = %+v, want it differing in content", obs)
	}
	apply(t, d, &changed, drivers.Updated)
	wantReloads(t, "Apply of new content", reloads, 1)
	wantState(t, name, "active")
	if got := show(t, name, "MainPID"); got == pid || got == "0" {
		t.Errorf("MainPID after the change is %s (before: %s), want the unit restarted", got, pid)
	}
	if got := show(t, name, "Description"); got != "after" {
		t.Errorf("the manager describes the unit as %q, want %q: it runs its old definition", got, "after")
	}
	if got := show(t, name, "NeedDaemonReload"); got != "no" {
		t.Errorf("NeedDaemonReload after Apply = %s, want no", got)
	}
	apply(t, d, &changed, drivers.Unchanged)
	wantReloads(t, "Apply of unchanged content", reloads, 0)
}

// TestLiveBatchOneReload: a batch of three units whose files changed
// reloads the manager once, then restarts each.
func TestLiveBatchOneReload(t *testing.T) {
	d := live(t)
	names := []string{"mesh-live-batch-a.service", "mesh-live-batch-b.service", "mesh-live-batch-c.service"}
	forget(t, names)
	reloads := reloadCounter(t)
	var specs, changed []drivers.Spec
	pids := map[string]string{}
	for _, name := range names {
		spec := &drivers.UnitSpec{Name: name, Content: sleeper(name + " before"), Enabled: true, Active: true}
		apply(t, d, spec, drivers.Created)
		pids[name] = show(t, name, "MainPID")
		c := *spec
		c.Content = sleeper(name + " after")
		specs, changed = append(specs, spec), append(changed, &c)
	}
	reloads()

	for i, r := range d.ApplyBatch(t.Context(), changed) {
		if r.Err != nil || r.Action != drivers.Updated {
			t.Errorf("ApplyBatch result %d (%s): %q, %v; want updated", i, names[i], r.Action, r.Err)
		}
	}
	wantReloads(t, "ApplyBatch of three changed units", reloads, 1)
	for _, name := range names {
		wantState(t, name, "active")
		if got := show(t, name, "MainPID"); got == pids[name] {
			t.Errorf("%s MainPID is still %s, want it restarted", name, got)
		}
		if got := show(t, name, "Description"); got != name+" after" {
			t.Errorf("%s is described as %q, want its new definition", name, got)
		}
	}
	for i, r := range d.ApplyBatch(t.Context(), changed) {
		if r.Err != nil || r.Action != drivers.Unchanged {
			t.Errorf("second ApplyBatch result %d: %q, %v; want unchanged", i, r.Action, r.Err)
		}
	}
	wantReloads(t, "a second ApplyBatch", reloads, 0)
}

// TestLiveRefresh: a running unit that started before the change is
// restarted; one that started after it is left; one that does not run is
// not started.
func TestLiveRefresh(t *testing.T) {
	d := live(t)
	name := "mesh-live-refresh.service"
	forget(t, []string{name})
	spec := &drivers.UnitSpec{Name: name, Content: sleeper("refreshed"), Active: true}
	before := time.Now()
	apply(t, d, spec, drivers.Created)
	pid := show(t, name, "MainPID")

	got, err := d.Refresh(t.Context(), spec, before)
	if err != nil || got.Did != "" || !strings.HasPrefix(got.Note, "started at ") || !strings.HasSuffix(got.Note, ", after the change") {
		t.Errorf("Refresh of a unit started after the change = %+v, %v; want nothing done, saying it started after", got, err)
	}
	if now := show(t, name, "MainPID"); now != pid {
		t.Errorf("MainPID after a refresh not needed: %s, want still %s", now, pid)
	}

	change := time.Now()
	got, err = d.Refresh(t.Context(), spec, change)
	if err != nil || got != (drivers.Refreshed{Did: "restarted"}) {
		t.Errorf("Refresh of a unit started before the change = %+v, %v; want restarted", got, err)
	}
	wantState(t, name, "active")
	if now := show(t, name, "MainPID"); now == pid || now == "0" {
		t.Errorf("MainPID after Refresh: %s (before: %s), want the unit restarted", now, pid)
	}

	systemctl(t, "stop", name)
	got, err = d.Refresh(t.Context(), spec, time.Now())
	if err != nil || got != (drivers.Refreshed{Note: "not running: a refresh does not start it"}) {
		t.Errorf("Refresh of a stopped unit = %+v, %v; want nothing done, saying it does not run", got, err)
	}
	wantState(t, name, "inactive")
}

// TestLiveRefreshReload: refresh: reload runs the unit's ExecReload (a
// HUP its shell traps; sh's own kill, as a minimal Debian has no
// /bin/kill) and does not restart it; reload-or-restart reloads a unit
// that can.
func TestLiveRefreshReload(t *testing.T) {
	d := live(t)
	name := "mesh-live-reload.service"
	dir := "/run/mesh-live-reload"
	forget(t, []string{name})
	spec := &drivers.UnitSpec{Name: name, Active: true, Refresh: drivers.RefreshReload, Content: "[Service]\n" +
		"RuntimeDirectory=mesh-live-reload\n" +
		"ExecStart=/bin/sh -c 'trap \"echo hup >> " + dir + "/hups\" HUP; echo ready > " + dir + "/ready; while :; do sleep 1 & wait; done'\n" +
		"ExecReload=/bin/sh -c 'kill -HUP ${MAINPID}'\n"}
	apply(t, d, spec, drivers.Created)
	waitFile(t, dir+"/ready", "ready\n") // the trap is set
	pid := show(t, name, "MainPID")

	got, err := d.Refresh(t.Context(), spec, time.Now())
	if err != nil || got != (drivers.Refreshed{Did: "reloaded"}) {
		t.Fatalf("Refresh(reload) = %+v, %v; want reloaded", got, err)
	}
	waitFile(t, dir+"/hups", "hup\n")
	either := *spec
	either.Refresh = drivers.RefreshReloadOrRestart
	got, err = d.Refresh(t.Context(), &either, time.Now())
	if err != nil || got != (drivers.Refreshed{Did: "reloaded"}) {
		t.Fatalf("Refresh(reload-or-restart) = %+v, %v; want reloaded", got, err)
	}
	waitFile(t, dir+"/hups", "hup\nhup\n")
	if now := show(t, name, "MainPID"); now != pid {
		t.Errorf("MainPID after two reloads: %s, want still %s", now, pid)
	}
}

// waitFile waits for file to hold want.
func waitFile(t *testing.T, file, want string) {
	t.Helper()
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if got, _ = os.ReadFile(file); string(got) == want {
			return
		}
	}
	t.Fatalf("%s holds %q, want %q", file, got, want)
}

// TestLiveFailedStart: a unit that fails to start fails Apply with its
// journal lines: what it said, its secrets redacted, nothing a terminal
// would act on.
func TestLiveFailedStart(t *testing.T) {
	d := live(t)
	name := "mesh-live-fails.service"
	forget(t, []string{name})
	// A oneshot's start job ends when its process does; a simple
	// service's ends once it is forked, and its failure comes after.
	// Its words are this run's own: the journal keeps earlier runs'.
	boom := "boom-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	spec := &drivers.UnitSpec{Name: name, Active: true, Content: "[Service]\nType=oneshot\n" +
		"ExecStart=/bin/sh -c 'echo the door says opensesame; printf \"\\033[31mred\\033[0m\\r\\n\"; echo " + boom + "-password=hunter2 >&2; exit 3'\n"}
	_, err := d.Apply(t.Context(), spec)
	if !errors.Is(err, unit.ErrJobFailed) {
		t.Fatalf("Apply of a unit that fails = %v, want ErrJobFailed", err)
	}
	msg := err.Error()
	for _, want := range []string{`the job ended "failed"`, "its journal:", boom + "-password=[redacted]", "the door says [secret]"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q:\n%s", want, msg)
		}
	}
	for _, secret := range []string{"hunter2", "opensesame"} {
		if strings.Contains(msg, secret) {
			t.Errorf("the error holds the secret %q:\n%s", secret, msg)
		}
	}
	if lines := strings.Count(msg, "\n"); lines > 21 {
		t.Errorf("the error holds %d lines, want at most the journal's 20 and the one before", lines)
	}
	wantTerminalSafe(t, "the error", msg)
	t.Logf("the error:\n%s", msg)
	wantState(t, name, "failed")
}

// TestLivePackaged: a unit declared without content, whose file a package
// installed (here the test, in /usr/lib/systemd/system), is enabled,
// started and stopped without its file being touched, and Remove leaves
// it as it is.
func TestLivePackaged(t *testing.T) {
	d := live(t)
	name := "mesh-live-pkg.service"
	file := "/usr/lib/systemd/system/" + name
	forget(t, []string{name}, file)
	install(t, file, sleeper("packaged"))
	was := fileState(t, file)

	spec := &drivers.UnitSpec{Name: name, Enabled: true, Active: true}
	if obs := observe(t, d, spec); !obs.Exists || strings.Join(obs.Differs, ",") != "enabled,active" {
		t.Errorf("Observe of the packaged unit = %+v, want it found, differing in enabled and active", obs)
	}
	apply(t, d, spec, drivers.Updated)
	wantState(t, name, "active")
	if obs := observe(t, d, spec); !obs.InSync {
		t.Errorf("Observe after Apply = %+v, want in sync", obs)
	}
	stopped := &drivers.UnitSpec{Name: name, Enabled: true}
	apply(t, d, stopped, drivers.Updated)
	wantState(t, name, "inactive")
	apply(t, d, spec, drivers.Updated)
	wantState(t, name, "active")

	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: name}); err != nil {
		t.Errorf("Remove of a packaged unit: %v", err)
	}
	wantState(t, name, "active")
	if got := show(t, name, "UnitFileState"); got != "enabled" {
		t.Errorf("after Remove the unit is %s, want left enabled", got)
	}
	if now := fileState(t, file); now != was {
		t.Errorf("the packaged file changed:\n got: %s\nwant: %s", now, was)
	}
	if _, err := os.Lstat(filepath.Join(unit.Dir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file at %s/%s: %v, want none written", unit.Dir, name, err)
	}

	t.Run("lighttpd", func(t *testing.T) {
		const lighttpd = "/lib/systemd/system/lighttpd.service"
		if _, err := os.Stat(lighttpd); err != nil {
			t.Skipf("lighttpd is not installed: %v", err)
		}
		state := show(t, "lighttpd.service", "ActiveState")
		t.Cleanup(func() {
			if state == "active" {
				exec.Command("systemctl", "start", "lighttpd.service").Run()
			}
		})
		was := fileState(t, lighttpd)
		for _, active := range []bool{false, true} {
			spec := &drivers.UnitSpec{Name: "lighttpd.service", Enabled: true, Active: active}
			if _, err := d.Apply(t.Context(), spec); err != nil {
				t.Fatalf("Apply(%+v): %v", spec, err)
			}
			if obs := observe(t, d, spec); !obs.InSync {
				t.Errorf("Observe(%+v) after Apply = %+v, want in sync", spec, obs)
			}
		}
		wantState(t, "lighttpd.service", "active")
		if now := fileState(t, lighttpd); now != was {
			t.Errorf("lighttpd's file changed:\n got: %s\nwant: %s", now, was)
		}
	})
}

// TestLiveMasked: a masked unit is refused to be active, and not started.
func TestLiveMasked(t *testing.T) {
	d := live(t)
	name := "mesh-live-masked.service"
	file := "/usr/lib/systemd/system/" + name
	forget(t, []string{name}, file)
	install(t, file, sleeper("masked"))
	systemctl(t, "mask", name)

	spec := &drivers.UnitSpec{Name: name, Active: true}
	if obs := observe(t, d, spec); strings.Join(obs.Differs, ",") != "masked" {
		t.Errorf("Observe of a masked unit = %+v, want it differing in masked", obs)
	}
	_, err := d.Apply(t.Context(), spec)
	if !errors.Is(err, unit.ErrMasked) || !strings.Contains(err.Error(), "systemctl unmask "+name) {
		t.Errorf("Apply(active) of a masked unit = %v, want ErrMasked saying how to unmask", err)
	}
	wantState(t, name, "inactive")
	if got := show(t, name, "LoadState"); got != "masked" {
		t.Errorf("the unit's LoadState is %s, want it still masked", got)
	}
}

// TestLiveTemplate: an instance of a declared template runs by its own
// name; the template's new content reloads the manager once; Remove of the
// instance leaves it running, Remove of the template stops it.
func TestLiveTemplate(t *testing.T) {
	d := live(t)
	template := &drivers.UnitSpec{Name: "mesh-live-tpl@.service", Content: "[Unit]\nDescription=instance %i\n\n[Service]\nExecStart=/bin/sleep infinity\n\n[Install]\nWantedBy=multi-user.target\n"}
	instance := &drivers.UnitSpec{Name: "mesh-live-tpl@one.service", Enabled: true, Active: true}
	forget(t, []string{instance.Name, template.Name})
	reloads := reloadCounter(t)

	apply(t, d, template, drivers.Created)
	apply(t, d, instance, drivers.Updated)
	wantState(t, instance.Name, "active")
	if got := show(t, instance.Name, "Description"); got != "instance one" {
		t.Errorf("the instance is described as %q, want %q", got, "instance one")
	}
	if obs := observe(t, d, instance); !obs.InSync {
		t.Errorf("Observe of the running instance = %+v, want in sync", obs)
	}
	withContent := *instance
	withContent.Content = template.Content
	if _, err := d.Apply(t.Context(), &withContent); !errors.Is(err, drivers.ErrInvalidSpec) {
		t.Errorf("Apply(an instance with content) = %v, want ErrInvalidSpec", err)
	}

	reloads()
	changed := *template
	changed.Content = strings.Replace(template.Content, "instance %i", "changed %i", 1)
	apply(t, d, &changed, drivers.Updated)
	wantReloads(t, "Apply of the template's new content", reloads, 1)
	if got := show(t, instance.Name, "NeedDaemonReload"); got != "no" {
		t.Errorf("the instance's NeedDaemonReload = %s, want no", got)
	}

	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: instance.Name}); err != nil {
		t.Errorf("Remove of the instance: %v", err)
	}
	wantState(t, instance.Name, "active")
	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: template.Name}); err != nil {
		t.Fatalf("Remove of the template: %v", err)
	}
	wantState(t, instance.Name, "inactive")
	if _, err := os.Lstat(filepath.Join(unit.Dir, template.Name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the template's file after Remove: %v, want it gone", err)
	}
}

// TestLiveRemove: Remove stops the unit, disables it and removes its
// file, and the manager forgets it: reloaded once, as another unit that
// wants it keeps it loaded; a second Remove does nothing.
func TestLiveRemove(t *testing.T) {
	d := live(t)
	name, holder := "mesh-live-removed.service", "mesh-live-holder.service"
	forget(t, []string{holder, name})
	reloads := reloadCounter(t)
	apply(t, d, &drivers.UnitSpec{Name: name, Content: sleeper("removed"), Enabled: true, Active: true}, drivers.Created)
	apply(t, d, &drivers.UnitSpec{Name: holder, Active: true, Content: "[Unit]\nWants=" + name + "\n\n[Service]\nExecStart=/bin/sleep infinity\n"}, drivers.Created)
	reloads()

	for i := range 2 {
		if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: name}); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		wantReloads(t, "Remove "+strconv.Itoa(i+1), reloads, 1-i)
		wantState(t, name, "inactive")
		if got := show(t, name, "LoadState"); got != "not-found" {
			t.Errorf("LoadState after Remove = %s, want not-found", got)
		}
		if got := show(t, name, "NeedDaemonReload"); got != "no" {
			t.Errorf("NeedDaemonReload after Remove = %s, want no", got)
		}
		if _, err := os.Lstat(filepath.Join(unit.Dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the unit's file after Remove: %v, want it gone", err)
		}
		if _, err := os.Lstat(filepath.Join(unit.Dir, "multi-user.target.wants", name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the unit's wants link after Remove: %v, want it gone", err)
		}
	}
}

// TestLiveWatch: a unit stopped by hand is told of within a second.
func TestLiveWatch(t *testing.T) {
	d := live(t)
	probe, watched := "mesh-live-probe.service", "mesh-live-watched.service"
	forget(t, []string{probe, watched})
	// The probe is restarted until the watch tells of it: past the
	// manager's limit of five starts in ten seconds, but for this.
	apply(t, d, &drivers.UnitSpec{Name: probe, Active: true, Content: "[Unit]\nStartLimitIntervalSec=0\n\n[Service]\nExecStart=/bin/sleep infinity\n"}, drivers.Created)
	apply(t, d, &drivers.UnitSpec{Name: watched, Content: sleeper(watched), Active: true}, drivers.Created)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	told := make(chan string, 64)
	ended := make(chan error, 1)
	go func() { ended <- d.Watch(ctx, func(name string) { told <- name }) }()

	// The watch is listening once it tells of the probe restarted.
	listening := false
	for deadline := time.Now().Add(15 * time.Second); !listening && time.Now().Before(deadline); {
		systemctl(t, "restart", probe)
		timeout := time.After(2 * unit.Coalesce)
		for wait := true; wait && !listening; {
			select {
			case name := <-told:
				listening = name == probe
			case <-timeout:
				wait = false
			}
		}
	}
	if !listening {
		t.Fatal("the watch never told of the probe restarted")
	}

	systemctl(t, "stop", watched)
	stopped := time.Now()
	var names []string
	for timeout := time.After(time.Second); !slices.Contains(names, watched); {
		select {
		case name := <-told:
			names = append(names, name)
		case <-timeout:
			t.Fatalf("within a second of %s stopped, the watch told of %q only", watched, names)
		}
	}
	t.Logf("told of %s %v after it stopped", watched, time.Since(stopped))

	cancel()
	select {
	case err := <-ended:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Watch ended with %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Watch did not end with its context")
	}
}
