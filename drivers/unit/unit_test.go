package unit_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/drivers/unit"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// service is a unit file for a service wanted by target.
func service(description, target string) string {
	return "[Unit]\nDescription=" + description + "\n\n[Service]\nExecStart=/bin/true\n\n[Install]\nWantedBy=" + target + "\n"
}

func apply(t *testing.T, d *unit.Driver, spec *drivers.UnitSpec, want drivers.Action) {
	t.Helper()
	got, err := d.Apply(t.Context(), spec)
	if err != nil {
		t.Fatalf("Apply(%s): %v", spec.Name, err)
	}
	if got != want {
		t.Errorf("Apply(%s): got %q, want %q", spec.Name, got, want)
	}
}

func observe(t *testing.T, d *unit.Driver, spec *drivers.UnitSpec) drivers.Observation {
	t.Helper()
	obs, err := d.Observe(t.Context(), spec)
	if err != nil {
		t.Fatalf("Observe(%s): %v", spec.Name, err)
	}
	return obs
}

// wantLink checks the link systemctl enable makes in target's .wants
// directory, or its absence.
func wantLink(t *testing.T, root *rootfs.Root, target, name string, want bool) {
	t.Helper()
	link := root.Host("/etc/systemd/system/" + target + ".wants/" + name)
	dest, err := os.Readlink(link)
	switch {
	case want && err != nil:
		t.Errorf("wants link %s: %v, want it there", link, err)
	case want && dest != "/etc/systemd/system/"+name:
		t.Errorf("wants link %s points to %s, want /etc/systemd/system/%s", link, dest, name)
	case !want && !errors.Is(err, os.ErrNotExist):
		t.Errorf("wants link %s: %v (-> %q), want it gone", link, err, dest)
	}
}

func TestEnableDisable(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true, Active: true}

	obs := observe(t, d, spec)
	if obs.Exists || obs.InSync || strings.Join(obs.Differs, ",") != "absent" {
		t.Errorf("Observe before Apply = %+v, want absent", obs)
	}
	apply(t, d, spec, drivers.Created)
	if b, err := os.ReadFile(root.Host("/etc/systemd/system/mesh-hello.service")); err != nil || string(b) != spec.Content {
		t.Errorf("unit file after Apply: %q, %v; want the spec's content", b, err)
	}
	wantLink(t, root, "multi-user.target", spec.Name, true)
	obs = observe(t, d, spec)
	// Active is asked for, but no manager runs: not observed, not a
	// difference, and the note says so.
	if !obs.Exists || !obs.InSync || !strings.HasSuffix(obs.Seen, " enabled") {
		t.Errorf("Observe after Apply = %+v, want in sync and seen enabled", obs)
	}
	wantNote := "enablement only: no service manager runs in " + root.Dir()
	if obs.Note != wantNote {
		t.Errorf("Observe note = %q, want %q", obs.Note, wantNote)
	}
	if note := d.ApplyNote(spec); !strings.Contains(note, wantNote) {
		t.Errorf("ApplyNote = %q, want it to say %q", note, wantNote)
	}
	apply(t, d, spec, drivers.Unchanged)

	disabled := *spec
	disabled.Enabled = false
	if obs := observe(t, d, &disabled); obs.InSync || strings.Join(obs.Differs, ",") != "enabled" {
		t.Errorf("Observe(disabled) of an enabled unit = %+v, want differs in enabled", obs)
	}
	apply(t, d, &disabled, drivers.Updated)
	wantLink(t, root, "multi-user.target", spec.Name, false)
	if obs := observe(t, d, &disabled); !obs.InSync || !strings.HasSuffix(obs.Seen, " disabled") {
		t.Errorf("Observe after disabling = %+v, want in sync and seen disabled", obs)
	}
	apply(t, d, &disabled, drivers.Unchanged)

	apply(t, d, spec, drivers.Updated)
	wantLink(t, root, "multi-user.target", spec.Name, true)
	if err := d.Remove(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	wantLink(t, root, "multi-user.target", spec.Name, false)
	if _, err := os.Lstat(root.Host("/etc/systemd/system/mesh-hello.service")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("unit file after Remove: %v, want it gone", err)
	}
	if err := d.Remove(t.Context(), spec); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

// TestContentChange: new content is Updated, and an enabled unit's links
// follow its new [Install] section.
func TestContentChange(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true}
	apply(t, d, spec, drivers.Created)

	changed := *spec
	changed.Content = service("hello again", "graphical.target")
	if obs := observe(t, d, &changed); obs.InSync || strings.Join(obs.Differs, ",") != "content" {
		t.Errorf("Observe(changed) = %+v, want differs in content", obs)
	}
	apply(t, d, &changed, drivers.Updated)
	if b, _ := os.ReadFile(root.Host("/etc/systemd/system/mesh-hello.service")); string(b) != changed.Content {
		t.Errorf("unit file after the change: %q, want %q", b, changed.Content)
	}
	wantLink(t, root, "multi-user.target", spec.Name, false)
	wantLink(t, root, "graphical.target", spec.Name, true)
	apply(t, d, &changed, drivers.Unchanged)
}

// TestRejectedUnit: a unit systemd-analyze rejects fails with its message,
// naming the unit's path in the root, and nothing is written.
func TestRejectedUnit(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl", "systemd-analyze")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	good := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true}
	apply(t, d, good, drivers.Created)
	before := driverstest.Tree(t, root.Dir())

	for _, content := range []string{
		"[Unit]\n[Service\nExecStart=/bin/true\n",
		"[Service]\nExecStart=relative/true\n",
		"[Servic]\nExecStart=/bin/true\n",
	} {
		bad := &drivers.UnitSpec{Name: "mesh-hello.service", Content: content, Enabled: true}
		_, err := d.Apply(t.Context(), bad)
		if !errors.Is(err, drivers.ErrInvalidSpec) || !errors.Is(err, drivers.ErrToolFailed) {
			t.Errorf("Apply(%q): got %v, want ErrInvalidSpec and drivers.ErrToolFailed", content, err)
			continue
		}
		for _, want := range []string{"systemd-analyze verify", "exit code 1", "/etc/systemd/system/mesh-hello.service"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Apply(%q): error %q does not say %q", content, err, want)
			}
		}
		if strings.Contains(err.Error(), "mesh-host-verify") {
			t.Errorf("Apply(%q): error %q names the temporary copy", content, err)
		}
	}
	if after := driverstest.Tree(t, root.Dir()); after != before {
		t.Errorf("rejected units changed the root:\n got: %s\nwant: %s", after, before)
	}
}

// TestStaticCannotBeEnabled: a unit with no [Install] section cannot be
// enabled; asking for it is an invalid spec carrying systemctl's words.
func TestStaticCannotBeEnabled(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	d := unit.New(driverstest.OpenRoot(t, t.TempDir()), unit.Options{})
	static := &drivers.UnitSpec{Name: "mesh-static.service", Content: "[Service]\nExecStart=/bin/true\n", Enabled: true}
	_, err := d.Apply(t.Context(), static)
	if !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "static") || !strings.Contains(err.Error(), "no installation config") {
		t.Errorf("Apply(enabled static unit) = %v, want ErrInvalidSpec saying static and systemctl's reason", err)
	}
	static.Enabled = false
	apply(t, d, static, drivers.Unchanged) // the file was written; nothing else to do
	if obs := observe(t, d, static); !obs.InSync || !strings.HasSuffix(obs.Seen, " static") {
		t.Errorf("Observe(static, not enabled) = %+v, want in sync", obs)
	}
}

// TestMaskedUnit: a symlink at the unit's path (systemctl mask makes one
// to /dev/null) is reported, replaced by Apply, and left by Remove.
func TestMaskedUnit(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target")}
	if out, err := exec.Command("systemctl", "--root="+root.Dir(), "mask", spec.Name).CombinedOutput(); err != nil {
		t.Fatalf("systemctl mask: %v\n%s", err, out)
	}
	if obs := observe(t, d, spec); !obs.Exists || strings.Join(obs.Differs, ",") != "type" || obs.Seen != "type:symlink" {
		t.Errorf("Observe of a masked unit = %+v, want a type difference", obs)
	}
	if err := d.Remove(t.Context(), spec); !errors.Is(err, unit.ErrNotRegular) {
		t.Errorf("Remove of a masked unit = %v, want ErrNotRegular", err)
	}
	if dest, err := os.Readlink(root.Host("/etc/systemd/system/" + spec.Name)); err != nil || dest != "/dev/null" {
		t.Errorf("the mask after Remove: %q, %v; want it left", dest, err)
	}
	// To be enabled or active, a masked unit is refused: the host never
	// unmasks one by itself.
	wanted := *spec
	wanted.Enabled = true
	before := driverstest.Tree(t, root.Dir())
	if _, err := d.Apply(t.Context(), &wanted); !errors.Is(err, unit.ErrMasked) || !strings.Contains(err.Error(), "systemctl unmask mesh-hello.service") || !strings.Contains(err.Error(), "a symlink to /dev/null at /etc/systemd/system/mesh-hello.service") {
		t.Errorf("Apply(enabled) of a masked unit = %v, want ErrMasked naming the mask and how to lift it", err)
	}
	if after := driverstest.Tree(t, root.Dir()); after != before {
		t.Errorf("a refused Apply changed the root:\n got: %s\nwant: %s", after, before)
	}
	// Neither enabled nor active, the declared file replaces the link.
	apply(t, d, spec, drivers.Updated)
	if obs := observe(t, d, spec); !obs.InSync {
		t.Errorf("Observe after Apply over the mask = %+v, want in sync", obs)
	}
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("/dev/null after Apply over a mask to it: %v, %v", fi, err)
	}
}

func TestInvalidNames(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	d := unit.New(driverstest.OpenRoot(t, t.TempDir()), unit.Options{})
	for _, name := range []string{"", "nginx", "../x.service", "a/b.service", "a b.service", ".service", "x.conf", "@.service", "a@b@c.service", strings.Repeat("a", 250) + ".service"} {
		spec := &drivers.UnitSpec{Name: name, Content: "[Unit]\n"}
		if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("Apply(%q) = %v, want ErrInvalidSpec", name, err)
		}
	}
	// "-" begins systemd's names for the root slice and mount: accepted,
	// and never read as an option.
	spec := &drivers.UnitSpec{Name: "-.slice", Content: "[Unit]\nDescription=root\n"}
	if _, err := d.Observe(t.Context(), spec); err != nil {
		t.Errorf("Observe(-.slice): %v", err)
	}
}

func TestConformance(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
		root := driverstest.OpenRoot(t, t.TempDir())
		return driverstest.Fixture{
			Driver: unit.New(root, unit.Options{}),
			Specs: []drivers.Spec{
				&drivers.UnitSpec{Name: "mesh-a.service", Content: service("a", "multi-user.target"), Enabled: true},
				&drivers.UnitSpec{Name: "mesh-b.timer", Content: "[Timer]\nOnCalendar=daily\n\n[Install]\nWantedBy=timers.target\n", Enabled: true},
			},
			Changed: func(spec drivers.Spec) drivers.Spec {
				c := *spec.(*drivers.UnitSpec)
				c.Content += "# changed\n"
				return &c
			},
			Snapshot: func(t *testing.T) string { return driverstest.Tree(t, root.Dir()) },
		}
	})
}

// TestNoSystemctl: without systemctl every call fails, naming it.
func TestNoSystemctl(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	d := unit.New(driverstest.OpenRoot(t, t.TempDir()), unit.Options{})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target")}
	_, errObserve := d.Observe(t.Context(), spec)
	_, errApply := d.Apply(t.Context(), spec)
	errRemove := d.Remove(t.Context(), spec)
	for _, err := range []error{errObserve, errApply, errRemove} {
		if !errors.Is(err, drivers.ErrToolMissing) || !strings.Contains(err.Error(), "systemctl") {
			t.Errorf("got %v, want ErrToolMissing naming systemctl", err)
		}
	}
}

// TestNoAnalyze: without systemd-analyze units are written unverified, and
// the note says so.
func TestNoAnalyze(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	systemctl, _ := exec.LookPath("systemctl")
	bin := t.TempDir()
	if err := os.Symlink(systemctl, filepath.Join(bin, "systemctl")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	spec := &drivers.UnitSpec{Name: "mesh-hello.service", Content: service("hello", "multi-user.target"), Enabled: true}
	if note := d.ApplyNote(spec); !strings.Contains(note, "not verified: systemd-analyze is not installed") {
		t.Errorf("ApplyNote = %q, want it to say the unit is not verified", note)
	}
	apply(t, d, spec, drivers.Created)
	wantLink(t, root, "multi-user.target", spec.Name, true)
}

// packaged installs a unit file as a package would, in the root's
// /usr/lib/systemd/system, with /lib a link to usr/lib as on a merged-/usr
// Debian; it returns the file's path outside the root.
func packaged(t *testing.T, root *rootfs.Root, name, content string) string {
	t.Helper()
	dir := root.Host("/usr/lib/systemd/system")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/lib", root.Host("/lib")); err != nil && !errors.Is(err, os.ErrExist) {
		t.Fatal(err)
	}
	file := filepath.Join(dir, name)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// fileState is a file's content, inode, mode, owner, and modification
// and change times: what changes when anything writes, replaces or
// touches it, but reads it.
func fileState(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(file, &st); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%q inode %d mode %o owner %d:%d mtime %v ctime %v", b, st.Ino, st.Mode, st.Uid, st.Gid, st.Mtim, st.Ctim)
}

// TestPackagedUnit: a unit declared without content is one whose file
// someone else installed: the host enables and disables it, and never
// writes, replaces or removes the file; Remove leaves it as it is.
func TestPackagedUnit(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	file := packaged(t, root, "mesh-pkg.service", service("packaged", "multi-user.target"))
	was := fileState(t, file)
	spec := &drivers.UnitSpec{Name: "mesh-pkg.service", Enabled: true, Active: true}

	obs := observe(t, d, spec)
	if !obs.Exists || obs.InSync || strings.Join(obs.Differs, ",") != "enabled" || !strings.HasPrefix(obs.Seen, "file:/usr/lib/systemd/system/mesh-pkg.service sha256:") || !strings.HasSuffix(obs.Seen, " disabled") {
		t.Errorf("Observe of a packaged unit, disabled = %+v, want it found in /usr/lib/systemd/system, differing in enabled", obs)
	}
	apply(t, d, spec, drivers.Updated)
	link := root.Host("/etc/systemd/system/multi-user.target.wants/mesh-pkg.service")
	// systemctl names the file by the first of its search path that
	// reaches it: /lib/systemd/system, through the link to usr/lib.
	if dest, err := os.Readlink(link); err != nil || (dest != "/lib/systemd/system/mesh-pkg.service" && dest != "/usr/lib/systemd/system/mesh-pkg.service") {
		t.Errorf("wants link after enabling: %q, %v; want it to the packaged file", dest, err)
	}
	if obs := observe(t, d, spec); !obs.InSync {
		t.Errorf("Observe after Apply = %+v, want in sync", obs)
	}
	apply(t, d, spec, drivers.Unchanged)
	if _, err := os.Lstat(root.Host("/etc/systemd/system/mesh-pkg.service")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a unit file in /etc/systemd/system: %v, want none written", err)
	}

	before := driverstest.Tree(t, root.Dir())
	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: spec.Name}); err != nil {
		t.Errorf("Remove of a packaged unit: %v, want it released as it is", err)
	}
	if after := driverstest.Tree(t, root.Dir()); after != before {
		t.Errorf("Remove of a packaged unit changed the root:\n got: %s\nwant: %s", after, before)
	}

	disabled := &drivers.UnitSpec{Name: spec.Name}
	apply(t, d, disabled, drivers.Updated)
	if _, err := os.Lstat(link); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("wants link after disabling: %v, want it gone", err)
	}
	if now := fileState(t, file); now != was {
		t.Errorf("the packaged file changed:\n got: %s\nwant: %s", now, was)
	}
}

// TestPackagedNotInstalled: a unit declared without content whose file is
// nowhere is absent, and Apply fails saying so without writing anything:
// above all not an empty unit file, which would mask the unit.
func TestPackagedNotInstalled(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	packaged(t, root, "mesh-other.service", service("other", "multi-user.target"))
	for _, spec := range []*drivers.UnitSpec{
		{Name: "mesh-nowhere.service", Enabled: true, Active: true},
		{Name: "mesh-nowhere.service"},
		{Name: "mesh-tpl@a.service", Enabled: true},
	} {
		obs := observe(t, d, spec)
		if obs.Exists || strings.Join(obs.Differs, ",") != "absent" || obs.Seen != "" {
			t.Errorf("Observe(%+v) = %+v, want absent", spec, obs)
		}
		before := driverstest.Tree(t, root.Dir())
		_, err := d.Apply(t.Context(), spec)
		if !errors.Is(err, unit.ErrNotInstalled) || !strings.Contains(err.Error(), "declared without content") {
			t.Errorf("Apply(%+v) = %v, want ErrNotInstalled saying it is declared without content", spec, err)
		}
		if after := driverstest.Tree(t, root.Dir()); after != before {
			t.Errorf("Apply(%+v) changed the root:\n got: %s\nwant: %s", spec, after, before)
		}
	}
}

// TestPackagedMasked: a masked unit (systemctl mask: a link to /dev/null
// in /etc/systemd/system) is refused to be enabled or active, naming the
// mask and how to lift it; neither enabled nor active, it is in sync.
func TestPackagedMasked(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	packaged(t, root, "mesh-pkg.service", service("packaged", "multi-user.target"))
	if out, err := exec.Command("systemctl", "--root="+root.Dir(), "mask", "mesh-pkg.service").CombinedOutput(); err != nil {
		t.Fatalf("systemctl mask: %v\n%s", err, out)
	}
	spec := &drivers.UnitSpec{Name: "mesh-pkg.service", Active: true}
	obs := observe(t, d, spec)
	if !obs.Exists || strings.Join(obs.Differs, ",") != "masked" || !strings.Contains(obs.Note, "systemctl unmask mesh-pkg.service") {
		t.Errorf("Observe(active) of a masked unit = %+v, want it differing in masked, the note saying how to unmask", obs)
	}
	before := driverstest.Tree(t, root.Dir())
	_, err := d.Apply(t.Context(), spec)
	if !errors.Is(err, unit.ErrMasked) || !strings.Contains(err.Error(), "systemctl unmask mesh-pkg.service") || !strings.Contains(err.Error(), "/dev/null") {
		t.Errorf("Apply(active) of a masked unit = %v, want ErrMasked naming the mask and how to lift it", err)
	}
	if after := driverstest.Tree(t, root.Dir()); after != before {
		t.Errorf("a refused Apply changed the root:\n got: %s\nwant: %s", after, before)
	}
	idle := &drivers.UnitSpec{Name: "mesh-pkg.service"}
	if obs := observe(t, d, idle); !obs.InSync {
		t.Errorf("Observe(neither enabled nor active) of a masked unit = %+v, want in sync", obs)
	}
	apply(t, d, idle, drivers.Unchanged)
}

// TestPackagedStatic: a unit with no [Install] section is in sync not
// enabled, and cannot be enabled.
func TestPackagedStatic(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	packaged(t, root, "mesh-static.service", "[Service]\nExecStart=/bin/true\n")
	static := &drivers.UnitSpec{Name: "mesh-static.service"}
	if obs := observe(t, d, static); !obs.InSync || !strings.HasSuffix(obs.Seen, " static") {
		t.Errorf("Observe(static, not enabled) = %+v, want in sync and seen static", obs)
	}
	static.Enabled = true
	if _, err := d.Apply(t.Context(), static); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "static") {
		t.Errorf("Apply(enabled static unit) = %v, want ErrInvalidSpec saying static", err)
	}
}

// TestTemplate: a template's file is a unit of its own (name@.service);
// an instance (name@inst.service) has none, is declared without content
// and enabled by its own name; Remove of an instance leaves it, Remove of
// the template takes its file and every instance's links.
func TestTemplate(t *testing.T) {
	basetest.NeedTools(t, "systemd", "systemctl")
	root := driverstest.OpenRoot(t, t.TempDir())
	d := unit.New(root, unit.Options{})
	template := &drivers.UnitSpec{Name: "mesh-t@.service", Content: "[Service]\nExecStart=/bin/echo %i\n\n[Install]\nWantedBy=multi-user.target\n"}
	instance := &drivers.UnitSpec{Name: "mesh-t@a.service", Enabled: true, Active: true}

	if obs := observe(t, d, instance); strings.Join(obs.Differs, ",") != "absent" {
		t.Errorf("Observe of an instance before its template = %+v, want absent", obs)
	}
	apply(t, d, template, drivers.Created)
	if obs := observe(t, d, instance); !obs.Exists || strings.Join(obs.Differs, ",") != "enabled" || !strings.HasPrefix(obs.Seen, "file:/etc/systemd/system/mesh-t@.service ") {
		t.Errorf("Observe of an instance of an installed template = %+v, want its template's file found, differing in enabled", obs)
	}
	apply(t, d, instance, drivers.Updated)
	link := root.Host("/etc/systemd/system/multi-user.target.wants/mesh-t@a.service")
	if dest, err := os.Readlink(link); err != nil || dest != "/etc/systemd/system/mesh-t@.service" {
		t.Errorf("wants link of the instance: %q, %v; want it to the template", dest, err)
	}
	if obs := observe(t, d, instance); !obs.InSync {
		t.Errorf("Observe of the enabled instance = %+v, want in sync", obs)
	}
	if obs := observe(t, d, template); !obs.InSync {
		t.Errorf("Observe of the template once an instance is enabled = %+v, want in sync", obs)
	}
	if p := d.PathOf(instance); p != "" {
		t.Errorf("PathOf(instance) = %q, want none: an instance has no file of its own", p)
	}

	withContent := *instance
	withContent.Content = template.Content
	if _, err := d.Apply(t.Context(), &withContent); !errors.Is(err, drivers.ErrInvalidSpec) || !strings.Contains(err.Error(), "mesh-t@.service") {
		t.Errorf("Apply(an instance with content) = %v, want ErrInvalidSpec naming the template to declare", err)
	}
	activeTemplate := *template
	activeTemplate.Active = true
	if _, err := d.Apply(t.Context(), &activeTemplate); !errors.Is(err, drivers.ErrInvalidSpec) {
		t.Errorf("Apply(an active template) = %v, want ErrInvalidSpec", err)
	}

	before := driverstest.Tree(t, root.Dir())
	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: instance.Name}); err != nil {
		t.Errorf("Remove of an instance: %v", err)
	}
	if after := driverstest.Tree(t, root.Dir()); after != before {
		t.Errorf("Remove of an instance changed the root:\n got: %s\nwant: %s", after, before)
	}
	if err := d.Remove(t.Context(), &drivers.UnitSpec{Name: template.Name}); err != nil {
		t.Fatalf("Remove of the template: %v", err)
	}
	for _, p := range []string{link, root.Host("/etc/systemd/system/mesh-t@.service")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Remove of the template: %v, want it gone", p, err)
		}
	}
}
