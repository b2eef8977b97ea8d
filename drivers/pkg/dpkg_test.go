package pkg_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/pkg"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// buildDeb builds the package name with dpkg-deb into dir: one file,
// /usr/share/NAME/README, and a control file. It returns the .deb's path.
func buildDeb(t *testing.T, dir, name string) string {
	t.Helper()
	basetest.NeedTools(t, "dpkg", "dpkg-deb")
	tree := t.TempDir()
	files := map[string]string{
		"DEBIAN/control":                fmt.Sprintf("Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: mesh-host tests <tests@example.invalid>\nDescription: a package the mesh-host tests install\n", name),
		"usr/share/" + name + "/README": "hello from " + name + "\n",
	}
	for p, content := range files {
		writeFile(t, filepath.Join(tree, p), content)
	}
	deb := filepath.Join(dir, name+"_1.0_all.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", tree, deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build %s: %v\n%s", name, err, out)
	}
	return deb
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dpkgRoot is a root prefix with a dpkg database of its own: dpkg --root
// needs no more than the info and updates directories and an empty status
// file (it makes its lock files, triggers and status-old itself).
func dpkgRoot(t *testing.T) *rootfs.Root {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(dir, "var/lib/dpkg/status"), "")
	root, err := rootfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func present(name string) *drivers.PackageSpec { return &drivers.PackageSpec{Name: name} }

func TestDpkgInstallObserveRemove(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	root := dpkgRoot(t)
	debs := t.TempDir()
	buildDeb(t, debs, "mesh-test-hello")
	d := pkg.New(root, pkg.Options{DebDir: debs})
	spec := present("mesh-test-hello")
	readme := root.Host("/usr/share/mesh-test-hello/README")

	obs, err := d.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Exists || obs.InSync || strings.Join(obs.Differs, ",") != "absent" {
		t.Errorf("Observe before install = %+v, want absent", obs)
	}
	if got, err := d.Apply(t.Context(), spec); err != nil || got != drivers.Created {
		t.Fatalf("Apply = %q, %v; want created", got, err)
	}
	if b, err := os.ReadFile(readme); err != nil || string(b) != "hello from mesh-test-hello\n" {
		t.Errorf("README under the root after install: %q, %v", b, err)
	}
	obs, err = d.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if !obs.Exists || !obs.InSync || obs.Seen != "installed" {
		t.Errorf("Observe after install = %+v, want installed and in sync", obs)
	}
	if got, err := d.Apply(t.Context(), spec); err != nil || got != drivers.Unchanged {
		t.Errorf("second Apply = %q, %v; want unchanged", got, err)
	}
	absent := &drivers.PackageSpec{Name: "mesh-test-hello", State: drivers.Absent}
	if obs, err := d.Observe(t.Context(), absent); err != nil || obs.InSync || strings.Join(obs.Differs, ",") != "present" {
		t.Errorf("Observe(state absent) while installed = %+v, %v; want differs in present", obs, err)
	}

	if err := d.Remove(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(readme); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("README after remove: %v, want it gone", err)
	}
	obs, err = d.Observe(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if obs.Exists || obs.InSync {
		t.Errorf("Observe after remove = %+v, want absent", obs)
	}
	if _, err := os.Stat("/usr/share/mesh-test-hello"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the package reached the machine's own /usr: %v", err)
	}
}

// TestDpkgStateAbsent: a spec with state absent removes an installed
// package (Updated), and removing that spec leaves things as they are.
func TestDpkgStateAbsent(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	root := dpkgRoot(t)
	debs := t.TempDir()
	buildDeb(t, debs, "mesh-test-hello")
	d := pkg.New(root, pkg.Options{DebDir: debs})
	absent := &drivers.PackageSpec{Name: "mesh-test-hello", State: drivers.Absent}

	if got, err := d.Apply(t.Context(), absent); err != nil || got != drivers.Unchanged {
		t.Errorf("Apply(absent) of a package not installed = %q, %v; want unchanged", got, err)
	}
	if _, err := d.Apply(t.Context(), present("mesh-test-hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := d.Apply(t.Context(), absent); err != nil || got != drivers.Updated {
		t.Errorf("Apply(absent) of an installed package = %q, %v; want updated", got, err)
	}
	if obs, err := d.Observe(t.Context(), absent); err != nil || !obs.InSync || obs.Exists {
		t.Errorf("Observe(absent) after = %+v, %v; want in sync, not existing", obs, err)
	}
	if _, err := os.Stat(root.Host("/usr/share/mesh-test-hello")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("package files after Apply(absent): %v, want gone", err)
	}
	if err := d.Remove(t.Context(), absent); err != nil {
		t.Errorf("Remove(absent) = %v, want nil", err)
	}
}

func TestDpkgNotInDebDir(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	root := dpkgRoot(t)
	debs := t.TempDir()
	buildDeb(t, debs, "mesh-test-hello")
	d := pkg.New(root, pkg.Options{DebDir: debs})

	_, err := d.Apply(t.Context(), present("mesh-test-nowhere"))
	if !errors.Is(err, pkg.ErrNoSource) {
		t.Fatalf("Apply of a package with no .deb: got %v, want ErrNoSource", err)
	}
	for _, want := range []string{"mesh-test-nowhere", debs, "mesh-test-hello"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

// TestDpkgToolMessage: dpkg's own message and exit code reach the
// error when it refuses what it is given.
func TestDpkgToolMessage(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	root := dpkgRoot(t)
	debs := t.TempDir()
	tree := t.TempDir()
	// A package that depends on one nobody has: dpkg unpacks it, then
	// refuses to configure it.
	writeFile(t, filepath.Join(tree, "DEBIAN/control"), "Package: mesh-test-needy\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.invalid>\nDepends: mesh-test-nonexistent\nDescription: x\n")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", tree, filepath.Join(debs, "needy.deb")).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	d := pkg.New(root, pkg.Options{DebDir: debs})

	_, err := d.Apply(t.Context(), present("mesh-test-needy"))
	if !errors.Is(err, drivers.ErrToolFailed) {
		t.Fatalf("Apply: got %v, want drivers.ErrToolFailed", err)
	}
	for _, want := range []string{"dpkg", "exit code 1", "depends on mesh-test-nonexistent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestDpkgLockHeld: with dpkg's frontend lock held by another process
// (this one, through an fcntl lock as apt and dpkg take it), installing
// fails at once with dpkg's message and exit code.
func TestDpkgLockHeld(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	root := dpkgRoot(t)
	debs := t.TempDir()
	buildDeb(t, debs, "mesh-test-hello")
	d := pkg.New(root, pkg.Options{DebDir: debs})

	lock, err := os.OpenFile(root.Host("/var/lib/dpkg/lock-frontend"), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := unix.FcntlFlock(lock.Fd(), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatal(err)
	}

	_, err = d.Apply(t.Context(), present("mesh-test-hello"))
	if !errors.Is(err, drivers.ErrToolFailed) {
		t.Fatalf("Apply with the lock held: got %v, want drivers.ErrToolFailed", err)
	}
	for _, want := range []string{"exit code 2", "dpkg frontend lock", fmt.Sprint(os.Getpid())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := os.Stat(root.Host("/usr/share/mesh-test-hello")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("package files with the lock held: %v, want none", err)
	}
}

// aptRoot is a dpkg root with an apt setup of its own whose one source is
// a flat repository (a directory with a Packages index) holding the given
// .debs. The index is written here, as dpkg-scanpackages would, and the
// lists are fetched with apt-get update.
func aptRoot(t *testing.T, debs ...string) *rootfs.Root {
	t.Helper()
	root := aptRootWithoutLists(t, debs...)
	conf := filepath.Join(t.TempDir(), "apt.conf")
	writeFile(t, conf, `Dir "`+root.Dir()+`/";`+"\n")
	update := exec.Command("apt-get", "update")
	update.Env = append(os.Environ(), "APT_CONFIG="+conf, "LC_ALL=C")
	if out, err := update.CombinedOutput(); err != nil {
		t.Fatalf("apt-get update in %s: %v\n%s", root.Dir(), err, out)
	}
	return root
}

// aptRootWithoutLists is aptRoot before its first apt-get update: a fresh
// machine's state.
func aptRootWithoutLists(t *testing.T, debs ...string) *rootfs.Root {
	t.Helper()
	basetest.NeedTools(t, "apt", "apt-get")
	root := dpkgRoot(t)
	for _, d := range []string{"etc/apt/apt.conf.d", "etc/apt/preferences.d", "etc/apt/sources.list.d", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/log/apt"} {
		if err := os.MkdirAll(root.Host(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	repo := t.TempDir()
	var index strings.Builder
	for _, deb := range debs {
		data, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(deb)
		writeFile(t, filepath.Join(repo, name), string(data))
		control, err := exec.Command("dpkg-deb", "--field", deb).Output()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&index, "%sFilename: ./%s\nSize: %d\nSHA256: %x\n\n", control, name, len(data), sha256.Sum256(data))
	}
	writeFile(t, filepath.Join(repo, "Packages"), index.String())
	writeFile(t, root.Host("/etc/apt/sources.list"), "deb [trusted=yes] file:"+repo+" ./\n")
	return root
}

// TestAptInstallsByName: without a DebDir, a root with an apt setup of its
// own gets packages by name through apt-get, which installs them into the
// root and reads nothing of the machine's apt configuration.
func TestAptInstallsByName(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	basetest.NeedTools(t, "apt", "apt-get")
	root := aptRoot(t, buildDeb(t, t.TempDir(), "mesh-test-hello"))
	d := pkg.New(root, pkg.Options{})
	spec := present("mesh-test-hello")

	if got, err := d.Apply(t.Context(), spec); err != nil || got != drivers.Created {
		t.Fatalf("Apply = %q, %v; want created", got, err)
	}
	if _, err := os.Stat(root.Host("/usr/share/mesh-test-hello/README")); err != nil {
		t.Errorf("README under the root after apt-get install: %v", err)
	}
	if obs, err := d.Observe(t.Context(), spec); err != nil || !obs.InSync {
		t.Errorf("Observe after install = %+v, %v; want in sync", obs, err)
	}
	if err := d.Remove(t.Context(), spec); err != nil {
		t.Fatal(err)
	}
	if obs, err := d.Observe(t.Context(), spec); err != nil || obs.Exists {
		t.Errorf("Observe after remove = %+v, %v; want absent", obs, err)
	}
}

// TestAptUnknownPackage: a package no source has fails with apt-get's own
// message and exit code.
func TestAptUnknownPackage(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	basetest.NeedTools(t, "apt", "apt-get")
	root := aptRoot(t, buildDeb(t, t.TempDir(), "mesh-test-hello"))
	d := pkg.New(root, pkg.Options{})

	_, err := d.Apply(t.Context(), present("mesh-test-nowhere"))
	if !errors.Is(err, drivers.ErrToolFailed) {
		t.Fatalf("Apply of an unknown package: got %v, want drivers.ErrToolFailed", err)
	}
	for _, want := range []string{"apt-get", "exit code 100", "Unable to locate package mesh-test-nowhere"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestAptNoSetup: a root with neither an apt setup nor a DebDir has
// nowhere to install from, and says so without running anything.
func TestAptNoSetup(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg-query")
	root := dpkgRoot(t)
	d := pkg.New(root, pkg.Options{Backend: pkg.NewDpkg(root, "")})
	_, err := d.Apply(t.Context(), present("mesh-test-hello"))
	if !errors.Is(err, pkg.ErrNoSource) || !strings.Contains(err.Error(), "etc/apt") {
		t.Errorf("Apply in a root without apt: got %v, want ErrNoSource naming etc/apt", err)
	}
}

func TestConformance(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	debs := t.TempDir()
	buildDeb(t, debs, "mesh-test-hello")
	buildDeb(t, debs, "mesh-test-world")
	driverstest.Run(t, func(t *testing.T) driverstest.Fixture {
		root := dpkgRoot(t)
		return driverstest.Fixture{
			Driver: pkg.New(root, pkg.Options{DebDir: debs}),
			Specs:  []drivers.Spec{present("mesh-test-hello"), present("mesh-test-world")},
			// A package has no update: it is present or absent, never at
			// a version, and state absent is a removal (Apply reports it
			// Updated, but the package then does not exist), tested in
			// TestDpkgStateAbsent.
			Changed: nil,
			// The whole root: the dpkg database and what packages put
			// there.
			Snapshot: func(t *testing.T) string { return driverstest.Tree(t, root.Dir()) },
		}
	})
}

// TestConcurrentApplies: a reconcile applies resources in parallel, and
// dpkg takes one change at a time; the driver queues them rather than
// fail on dpkg's lock.
func TestConcurrentApplies(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	debs := t.TempDir()
	names := []string{"mesh-test-a", "mesh-test-b", "mesh-test-c", "mesh-test-d"}
	for _, n := range names {
		buildDeb(t, debs, n)
	}
	d := pkg.New(dpkgRoot(t), pkg.Options{DebDir: debs})
	errs := make(chan error, len(names))
	for _, n := range names {
		go func() {
			_, err := d.Apply(t.Context(), present(n))
			errs <- err
		}()
	}
	for range names {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Apply: %v", err)
		}
	}
	for _, n := range names {
		if obs, err := d.Observe(t.Context(), present(n)); err != nil || !obs.InSync {
			t.Errorf("%s after concurrent applies: %+v, %v; want installed", n, obs, err)
		}
	}
}

// TestAptFetchesListsOnce: on a machine that never ran apt-get update, a
// package apt cannot locate makes the driver fetch the lists once and try
// again.
func TestAptFetchesListsOnce(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	basetest.NeedTools(t, "apt", "apt-get")
	root := aptRootWithoutLists(t, buildDeb(t, t.TempDir(), "mesh-test-hello"))
	d := pkg.New(root, pkg.Options{})
	if got, err := d.Apply(t.Context(), present("mesh-test-hello")); err != nil || got != drivers.Created {
		t.Fatalf("Apply on a root without package lists = %q, %v; want created", got, err)
	}
	// A name no source has still fails with apt's own words, lists or not.
	if _, err := d.Apply(t.Context(), present("mesh-test-nowhere")); err == nil || !strings.Contains(err.Error(), "Unable to locate package mesh-test-nowhere") {
		t.Errorf("Apply of an unknown package: got %v, want apt-get's message", err)
	}
}
