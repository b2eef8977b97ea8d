package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/packaging"
	"github.com/mesh-host/mesh-host/upgrade"
)

// The package sets the tests share: two versions, built once (a build is
// seconds of compression), so that an upgrade has somewhere to go.
var (
	buildOnce sync.Once
	buildDir  string
	v1, v2    Artifacts
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// built returns the two versions' artifacts, building them on first use.
func built(t *testing.T) (Artifacts, Artifacts) {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "mesh-host-packaging-test-"); buildErr != nil {
			return
		}
		for _, b := range []struct {
			version string
			out     *Artifacts
		}{{"1.0.0", &v1}, {"1.0.1", &v2}} {
			var all []Artifacts
			all, buildErr = Build(context.Background(), Options{Version: b.version, Out: filepath.Join(buildDir, b.version), Arches: []string{"amd64"}})
			if buildErr != nil {
				return
			}
			*b.out = all[0]
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return v1, v2
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	sum, err := upgrade.FileDigest(path)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// wantMode checks that path is there with mode perm (and is a directory
// when dir).
func wantMode(t *testing.T, path string, perm os.FileMode, dir bool) {
	t.Helper()
	fi, err := os.Lstat(path)
	switch {
	case err != nil:
		t.Errorf("%v", err)
	case fi.IsDir() != dir || (!dir && !fi.Mode().IsRegular()):
		t.Errorf("%s is %v, want a %s", path, fi.Mode(), map[bool]string{true: "directory", false: "regular file"}[dir])
	case fi.Mode().Perm() != perm:
		t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), perm)
	}
}

var markerRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (\d+)\n$`)

// wantVersion checks that versions/name holds the binary bin and an
// arrival marker with counter, and returns the marker.
func wantVersion(t *testing.T, versions, name, bin string, counter int) string {
	t.Helper()
	dir := filepath.Join(versions, name)
	wantMode(t, dir, 0o755, true)
	wantMode(t, filepath.Join(dir, "mesh-host"), 0o755, false)
	if got := sha256Of(t, filepath.Join(dir, "mesh-host")); got != name || sha256Of(t, bin) != name {
		t.Errorf("%s/mesh-host has sha256 %s; want the shipped binary's, which names the directory", dir, got)
	}
	b, err := os.ReadFile(filepath.Join(dir, packaging.ArrivedFile))
	if err != nil {
		t.Fatalf("version %s: %v", name, err)
	}
	m := markerRE.FindSubmatch(b)
	if m == nil || string(m[1]) != strconv.Itoa(counter) {
		t.Errorf("version %s's arrival marker %q, want \"TIME %d\\n\"", name, b, counter)
	}
	return string(b)
}

// dpkgRoot is a root with a dpkg database of its own, as drivers/pkg's
// tests make one: the info and updates directories and an empty status.
func dpkgRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// dpkg runs the real dpkg on root. Maintainer scripts run unchrooted
// (--force-script-chrootless) with DPKG_ROOT set to the root, which the
// scripts honour: chrooted, they would need a shell and coreutils inside
// the root, which an empty test root does not have.
func dpkg(t *testing.T, root string, args ...string) string {
	t.Helper()
	flags := []string{"--root=" + root, "--log=/dev/null", "--force-script-chrootless"}
	if os.Geteuid() != 0 {
		flags = append(flags, "--force-not-root")
	}
	return run(t, "dpkg", append(flags, args...)...)
}

// TestDeb installs the .deb with the real dpkg into a root of its own,
// upgrades it to the second version, installs that again, and removes and
// purges it.
func TestDeb(t *testing.T) {
	basetest.NeedTools(t, "dpkg", "dpkg", "dpkg-query", "dpkg-deb")
	a1, a2 := built(t)
	root := dpkgRoot(t)
	at := func(p string) string { return filepath.Join(root, p) }
	versions := at(packaging.VersionsDir)
	name1, name2 := sha256Of(t, a1.Binary), sha256Of(t, a2.Binary)

	out := dpkg(t, root, "--install", a1.Deb)
	if !strings.Contains(out, "mesh-host: version "+name1) || !strings.Contains(out, "next: mesh-host enrol TOKEN") {
		t.Errorf("first install said:\n%s", out)
	}
	if got := run(t, "dpkg-query", "--admindir="+at("var/lib/dpkg"), "-W", "--showformat=${Status} ${Version}", "mesh-host"); got != "install ok installed 1.0.0" {
		t.Errorf("dpkg-query: %q", got)
	}
	wantMode(t, at(packaging.BinaryPath), 0o755, false)
	wantMode(t, at(packaging.LauncherPath), 0o755, false)
	wantMode(t, at(packaging.ArrivePath), 0o755, false)
	wantMode(t, at(packaging.PackageUnitPath), 0o644, false)
	wantMode(t, at(packaging.StateDir), 0o700, true)
	wantMode(t, at(packaging.ConfigDir), 0o755, true)
	if dest, err := os.Readlink(at(packaging.CommandPath)); err != nil || dest != "../lib/mesh-host/mesh-host" {
		t.Errorf("%s -> %q, %v", packaging.CommandPath, dest, err)
	}
	if b, _ := os.ReadFile(at(packaging.LauncherPath)); !bytes.Equal(b, upgrade.Launcher) {
		t.Error("the installed launcher is not package upgrade's")
	}
	if b, _ := os.ReadFile(at(packaging.PackageUnitPath)); !bytes.Equal(b, packaging.Unit) {
		t.Error("the installed unit is not packaging's")
	}
	marker1 := wantVersion(t, versions, name1, at(packaging.BinaryPath), 1)
	// The versions are the installation's, not the package's files.
	owned := run(t, "dpkg-query", "--admindir="+at("var/lib/dpkg"), "-L", "mesh-host")
	for _, p := range []string{"/opt", packaging.StateDir, packaging.ConfigDir} {
		if strings.Contains(owned, p) {
			t.Errorf("the package owns %s:\n%s", p, owned)
		}
	}

	// Upgrade: the new version arrives beside the old, which stays as it
	// was for a rollback.
	out = dpkg(t, root, "--install", a2.Deb)
	if strings.Contains(out, "next:") {
		t.Errorf("an upgrade repeats the first install's advice:\n%s", out)
	}
	if got := run(t, "dpkg-query", "--admindir="+at("var/lib/dpkg"), "-W", "--showformat=${Version}", "mesh-host"); got != "1.0.1" {
		t.Errorf("after the upgrade dpkg-query says %q", got)
	}
	marker2 := wantVersion(t, versions, name2, at(packaging.BinaryPath), 2)
	if again := wantVersion(t, versions, name1, a1.Binary, 1); again != marker1 {
		t.Errorf("the upgrade touched the first version's marker: %q, then %q", marker1, again)
	}

	// The same version again adds nothing and changes no marker.
	dpkg(t, root, "--install", a2.Deb)
	if again := wantVersion(t, versions, name2, a2.Binary, 2); again != marker2 {
		t.Errorf("reinstalling rewrote the marker: %q, then %q", marker2, again)
	}
	if entries, _ := os.ReadDir(versions); len(entries) != 2 {
		t.Errorf("versions holds %d entries, want 2", len(entries))
	}

	// Removed and purged, the package takes its files and leaves the
	// versions and the state.
	dpkg(t, root, "--remove", "mesh-host")
	dpkg(t, root, "--purge", "mesh-host")
	for _, p := range []string{packaging.BinaryPath, packaging.LauncherPath, packaging.PackageUnitPath, packaging.CommandPath} {
		if _, err := os.Lstat(at(p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after purge: %v, want it gone", p, err)
		}
	}
	wantVersion(t, versions, name1, a1.Binary, 1)
	wantVersion(t, versions, name2, a2.Binary, 2)
	wantMode(t, at(packaging.StateDir), 0o700, true)
}

// untar unpacks a tarball with the real tar.
func untar(t *testing.T, tarball string) string {
	t.Helper()
	dir := t.TempDir()
	run(t, "tar", "-xzf", tarball, "-C", dir)
	return dir
}

// TestTarball installs from the tarball with its install.sh into a prefix
// of its own, then runs the installed launcher: it starts the installed
// version, which serves until stopped, and halts with upgrade.HaltStatus
// when that version cannot start. The installed unit passes
// systemd-analyze verify and systemctl --root enables it.
func TestTarball(t *testing.T) {
	a1, _ := built(t)
	unpacked := untar(t, a1.Tarball)
	base := filepath.Base(strings.TrimSuffix(a1.Tarball, ".tar.gz"))
	var names []string
	entries, _ := os.ReadDir(filepath.Join(unpacked, base))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got, want := strings.Join(names, " "), "arrive install.sh launcher mesh-host mesh-host.service"; got != want {
		t.Fatalf("the tarball holds %s/{%s}, want {%s}", base, got, want)
	}

	prefix := t.TempDir()
	at := func(p string) string { return filepath.Join(prefix, p) }
	name := sha256Of(t, a1.Binary)
	out := run(t, "sh", filepath.Join(unpacked, base, "install.sh"), "--prefix", prefix)
	for _, want := range []string{"installed mesh-host version " + name, "not enabled", "next: mesh-host enrol TOKEN"} {
		if !strings.Contains(out, want) {
			t.Errorf("install.sh did not say %q:\n%s", want, out)
		}
	}
	wantMode(t, at(packaging.BinaryPath), 0o755, false)
	wantMode(t, at(packaging.LauncherPath), 0o755, false)
	wantMode(t, at(packaging.ArrivePath), 0o755, false)
	wantMode(t, at("/etc/systemd/system/"+packaging.UnitName), 0o644, false)
	wantMode(t, at(packaging.StateDir), 0o700, true)
	wantMode(t, at(packaging.ConfigDir), 0o755, true)
	marker := wantVersion(t, at(packaging.VersionsDir), name, a1.Binary, 1)
	// Again: the version is there already.
	run(t, "sh", filepath.Join(unpacked, base, "install.sh"), "--prefix="+prefix+"/")
	if again := wantVersion(t, at(packaging.VersionsDir), name, a1.Binary, 1); again != marker {
		t.Errorf("installing again rewrote the marker: %q, then %q", marker, again)
	}

	// Halting first: the host that serves records its version known-good,
	// and the halt is to find none.
	t.Run("launcher halts", func(t *testing.T) { launchHalt(t, prefix, name) })
	t.Run("launcher serves", func(t *testing.T) { launchServe(t, prefix, name) })
	t.Run("unit", func(t *testing.T) { verifyUnit(t, prefix) })
}

// launcherEnv points the launcher into the prefix, restarting at once.
func launcherEnv(prefix string, extra ...string) []string {
	return append([]string{
		"MESH_HOST_VERSIONS=" + filepath.Join(prefix, packaging.VersionsDir),
		"MESH_HOST_STATE_DIR=" + filepath.Join(prefix, packaging.StateDir),
		"MESH_HOST_RESTART_DELAY=0",
	}, extra...)
}

// launchServe: the launcher starts the installed version, whose service
// answers the installed command (through /usr/bin/mesh-host) with the
// version it runs; SIGTERM stops both.
func launchServe(t *testing.T, prefix, name string) {
	var log lockedBuffer
	cmd := exec.Command("sh", filepath.Join(prefix, packaging.LauncherPath), "--root", prefix)
	cmd.Env = append(os.Environ(), launcherEnv(prefix)...)
	cmd.Stdout, cmd.Stderr = &log, &log
	// Its own process group, so that a failed test can end the host the
	// launcher started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	var status []byte
	for {
		status, _ = exec.Command(filepath.Join(prefix, packaging.CommandPath), "--state-dir", filepath.Join(prefix, packaging.StateDir), "status").CombinedOutput()
		// The build's version, 1.0.0, and its pid: the installed binary
		// runs, as the service.
		if regexp.MustCompile(`(?m)^running +version .*\b1\.0\.0\b.*, pid \d+`).Match(status) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the launched host never answered status with its version:\n%s\nlauncher:\n%s", status, log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Errorf("launcher after SIGTERM: %v, want exit 0\n%s", err, log.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("launcher still runs 20 s after SIGTERM:\n%s", log.String())
	}
	for _, want := range []string{"mesh-host launcher: starting " + name + "\n", "stopped (SIGTERM)"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("launcher log lacks %q:\n%s", want, log.String())
		}
	}
}

// launchHalt: a version that cannot start (serve refuses a flag), with a
// failure limit of 1 and no known-good version, halts the launcher with
// upgrade.HaltStatus, the status the unit does not restart.
func launchHalt(t *testing.T, prefix, name string) {
	cmd := exec.Command("sh", filepath.Join(prefix, packaging.LauncherPath), "--root", prefix, "--", "--no-such-flag")
	cmd.Env = append(os.Environ(), launcherEnv(prefix, "MESH_HOST_FAILURE_LIMIT=1")...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != upgrade.HaltStatus {
		t.Fatalf("launcher: %v, want exit status %d\n%s", err, upgrade.HaltStatus, out)
	}
	for _, want := range []string{"starting " + name, "HALT", "version " + name + " failed 1 starts in a row"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("launcher did not say %q:\n%s", want, out)
		}
	}
	if err := os.RemoveAll(filepath.Join(prefix, packaging.StateDir, "launcher")); err != nil {
		t.Fatal(err)
	}
}

// verifyUnit runs systemd-analyze verify on the installed unit, with
// ExecStart pointing at the installed launcher (verify checks that the
// command exists on this machine), and fails on any complaint, warnings
// included; then systemctl --root enables it in the prefix.
func verifyUnit(t *testing.T, prefix string) {
	basetest.NeedTools(t, "systemd", "systemd-analyze", "systemctl")
	unit, err := os.ReadFile(filepath.Join(prefix, "etc/systemd/system", packaging.UnitName))
	if err != nil {
		t.Fatal(err)
	}
	copyDir := t.TempDir()
	local := bytes.Replace(unit, []byte("ExecStart="+packaging.LauncherPath), []byte("ExecStart="+filepath.Join(prefix, packaging.LauncherPath)), 1)
	file := filepath.Join(copyDir, packaging.UnitName)
	if err := os.WriteFile(file, local, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", "--recursive-errors=no", file).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	run(t, "systemctl", "--root="+prefix, "enable", packaging.UnitName)
	link := filepath.Join(prefix, "etc/systemd/system/multi-user.target.wants", packaging.UnitName)
	if dest, err := os.Readlink(link); err != nil || dest != "/etc/systemd/system/"+packaging.UnitName {
		t.Errorf("systemctl enable made %s -> %q, %v", link, dest, err)
	}
}

// wantPaths are the files every package holds, as archive names without
// the leading "/".
var wantPaths = []string{
	strings.TrimPrefix(packaging.BinaryPath, "/"),
	strings.TrimPrefix(packaging.LauncherPath, "/"),
	strings.TrimPrefix(packaging.ArrivePath, "/"),
	strings.TrimPrefix(packaging.PackageUnitPath, "/"),
	strings.TrimPrefix(packaging.CommandPath, "/"),
}

// tarNames lists a tar stream's entries, with "./" and a trailing "/"
// dropped, and their sizes.
func tarNames(t *testing.T, r io.Reader) map[string]int64 {
	t.Helper()
	names := map[string]int64{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")] = h.Size
	}
}

func wantEntries(t *testing.T, what string, names map[string]int64, want ...string) {
	t.Helper()
	for _, w := range want {
		if _, ok := names[w]; !ok {
			keys := slices.Sorted(maps.Keys(names))
			t.Errorf("%s lacks %s; it holds %v", what, w, keys)
		}
	}
	if names[wantPaths[0]] < 1<<20 {
		t.Errorf("%s's %s is %d bytes: not the binary", what, wantPaths[0], names[wantPaths[0]])
	}
}

// TestRPM lists the .rpm with the real rpm where it is installed, and
// reads its lead otherwise.
func TestRPM(t *testing.T) {
	a1, _ := built(t)
	b, err := os.ReadFile(a1.RPM)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte{0xed, 0xab, 0xee, 0xdb}) || len(b) < 1<<20 {
		t.Fatalf("%s is not an rpm with a binary in it (%d bytes)", a1.RPM, len(b))
	}
	if _, err := exec.LookPath("rpm"); err != nil {
		t.Skipf("rpm is not installed (Debian package rpm): only the lead was checked: %v", err)
	}
	list := run(t, "rpm", "-qlp", a1.RPM)
	for _, p := range wantPaths {
		if !slices.Contains(strings.Split(strings.TrimSpace(list), "\n"), "/"+p) {
			t.Errorf("rpm -qlp lacks /%s:\n%s", p, list)
		}
	}
	scripts := run(t, "rpm", "-qp", "--scripts", a1.RPM)
	for _, want := range []string{"postinstall scriptlet", "preuninstall scriptlet", "arrive"} {
		if !strings.Contains(scripts, want) {
			t.Errorf("rpm --scripts lacks %q:\n%s", want, scripts)
		}
	}
	if got := strings.TrimSpace(run(t, "rpm", "-qp", "--queryformat", "%{NAME} %{VERSION} %{ARCH}", a1.RPM)); got != "mesh-host 1.0.0 x86_64" {
		t.Errorf("rpm says %q", got)
	}
}

// TestAPK reads the .apk as apk-tools would: gzip streams (signature,
// control, data) whose contents are one tar together, no segment but the
// last ending the archive.
func TestAPK(t *testing.T) {
	a1, _ := built(t)
	f, err := os.Open(a1.APK)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, zr)
	wantEntries(t, "the apk", names, append([]string{".PKGINFO", ".post-install", ".post-upgrade", ".pre-deinstall"}, wantPaths...)...)
}

// TestArch reads the Arch package: a zstd tar with .PKGINFO, .MTREE and
// .INSTALL (the scripts as functions) before the files.
func TestArch(t *testing.T) {
	a1, _ := built(t)
	f, err := os.Open(a1.ArchLinux)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := zstd.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var install, pkginfo []byte
	names := map[string]int64{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(h.Name, "/")] = h.Size
		switch h.Name {
		case ".INSTALL":
			install, _ = io.ReadAll(tr)
		case ".PKGINFO":
			pkginfo, _ = io.ReadAll(tr)
		}
	}
	wantEntries(t, "the Arch package", names, append([]string{".PKGINFO", ".MTREE", ".INSTALL"}, wantPaths...)...)
	for _, fn := range []string{"post_install()", "post_upgrade()", "pre_remove()"} {
		if !bytes.Contains(install, []byte(fn)) {
			t.Errorf(".INSTALL lacks %s:\n%s", fn, install)
		}
	}
	for _, line := range []string{"pkgname = mesh-host", "pkgver = 1.0.0-1", "arch = x86_64"} {
		if !bytes.Contains(pkginfo, []byte(line+"\n")) {
			t.Errorf(".PKGINFO lacks %q:\n%s", line, pkginfo)
		}
	}
}

// TestBinary: static, stripped, reporting its version; the release
// archive holds it alone.
func TestBinary(t *testing.T) {
	a1, _ := built(t)
	f, err := elf.Open(a1.Binary)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader: it is not static")
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary has a symbol table: it is not stripped")
	}
	digest, err := upgrade.FileDigest(a1.Binary)
	if err != nil {
		t.Fatal(err)
	}
	if out := run(t, a1.Binary, "version"); out != "1.0.0\nexecutable sha256:"+digest+"\n" {
		t.Errorf("mesh-host version: %q; want the label, then the binary's digest", out)
	}

	rf, err := os.Open(a1.Release)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	zr, err := gzip.NewReader(rf)
	if err != nil {
		t.Fatal(err)
	}
	names := tarNames(t, zr)
	if len(names) != 1 || names["mesh-host"] == 0 {
		t.Errorf("the release archive holds %v, want mesh-host alone", names)
	}

	sums, err := os.ReadFile(filepath.Join(filepath.Dir(a1.Binary), "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a1.All() {
		if line := sha256Of(t, p) + "  " + filepath.Base(p) + "\n"; !bytes.Contains(sums, []byte(line)) {
			t.Errorf("SHA256SUMS lacks %q", line)
		}
	}
}

// TestReproducibleArchive: the same files at the same time make the same
// bytes, so one build's release keeps its version directory on the nodes.
func TestReproducibleArchive(t *testing.T) {
	dir := t.TempDir()
	when := time.Unix(1_700_000_000, 0)
	entries := []tarFile{{"mesh-host", []byte("a binary"), 0o755}}
	a, b := filepath.Join(dir, "a.tar.gz"), filepath.Join(dir, "b.tar.gz")
	if err := writeTarGz(a, when, entries); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a clock that moved must not show
	if err := writeTarGz(b, when, entries); err != nil {
		t.Fatal(err)
	}
	if sha256Of(t, a) != sha256Of(t, b) {
		t.Error("two archives of the same files differ")
	}
}

func TestPackageVersion(t *testing.T) {
	for _, tc := range []struct{ in, version, prerelease string }{
		{"1.2.3", "1.2.3", ""},
		{"v1.2.3", "1.2.3", ""},
		{"v1.2.3-rc1", "1.2.3", "rc1"},
		{"2", "2", ""},
		{"72ff2ff", "0.0.0", "git72ff2ff"},
		{"72ff2ff-dirty", "0.0.0", "git72ff2ffdirty"},
		{"v1.2.3-4-g72ff2ff-dirty", "0.0.0", "gitv1234g72ff2ffdirty"},
	} {
		if v, p := packageVersion(tc.in); v != tc.version || p != tc.prerelease {
			t.Errorf("packageVersion(%q) = %q, %q; want %q, %q", tc.in, v, p, tc.version, tc.prerelease)
		}
	}
}

func TestMainUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--version", "1.0.0", "extra"},
		{"--version", "1.0.0", "--arch", "mips", "--out", t.TempDir()},
	} {
		var out, errOut bytes.Buffer
		if code := Main(args, &out, &errOut); code != 2 {
			t.Errorf("Main(%q) = %d, want 2; stderr %s", args, code, errOut.String())
		}
	}
}

// lockedBuffer is a buffer a process writes while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
