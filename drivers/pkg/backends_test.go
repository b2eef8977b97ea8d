package pkg_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/pkg"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// fakeTools puts a directory of shell scripts first and alone on PATH:
// each script is a tool by name. It returns the directory.
func fakeTools(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	return dir
}

// recorder is a fake tool that appends its arguments to $FAKE_LOG and
// exits with $FAKE_EXIT.
const recorder = `printf '%s\n' "$*" >> "$FAKE_LOG"
exit "${FAKE_EXIT:-0}"
`

// TestCommandLines: the pacman, apk and rpm/dnf backends run the command
// lines their managers document, on "/" and on another root.
func TestCommandLines(t *testing.T) {
	fakeTools(t, map[string]string{"pacman": recorder, "apk": recorder, "rpm": recorder, "dnf": recorder})
	log := filepath.Join(t.TempDir(), "log")
	t.Setenv("FAKE_LOG", log)
	other := t.TempDir()

	for _, tc := range []struct {
		root string
		new  func(*rootfs.Root) pkg.Backend
		want []string // Installed, Install, Remove
	}{
		{"/", func(r *rootfs.Root) pkg.Backend { return pkg.NewPacman(r) }, []string{
			"-Q nginx", "-S --noconfirm --needed nginx", "-R --noconfirm nginx"}},
		{other, func(r *rootfs.Root) pkg.Backend { return pkg.NewPacman(r) }, []string{
			"--root R --dbpath R/var/lib/pacman -Q nginx",
			"--root R --dbpath R/var/lib/pacman -S --noconfirm --needed nginx",
			"--root R --dbpath R/var/lib/pacman -R --noconfirm nginx"}},
		{"/", func(r *rootfs.Root) pkg.Backend { return pkg.NewApk(r) }, []string{
			"info -e nginx", "add nginx", "del nginx"}},
		{other, func(r *rootfs.Root) pkg.Backend { return pkg.NewApk(r) }, []string{
			"--root R info -e nginx", "--root R add nginx", "--root R del nginx"}},
		{"/", func(r *rootfs.Root) pkg.Backend { return pkg.NewRPM(r) }, []string{
			"-q nginx", "install -y nginx", "remove -y nginx"}},
		{other, func(r *rootfs.Root) pkg.Backend { return pkg.NewRPM(r) }, []string{
			"--root R -q nginx", "install -y --installroot=R nginx", "remove -y --installroot=R nginx"}},
	} {
		os.Remove(log)
		b := tc.new(driverstest.OpenRoot(t, tc.root))
		if ok, err := b.Installed(t.Context(), "nginx"); err != nil || !ok {
			t.Errorf("%T on %s: Installed = %v, %v; want true (exit code 0)", b, tc.root, ok, err)
		}
		if err := b.Install(t.Context(), "nginx"); err != nil {
			t.Errorf("%T on %s: Install: %v", b, tc.root, err)
		}
		if err := b.Remove(t.Context(), "nginx"); err != nil {
			t.Errorf("%T on %s: Remove: %v", b, tc.root, err)
		}
		data, _ := os.ReadFile(log)
		got := strings.Split(strings.TrimSpace(strings.ReplaceAll(string(data), other, "R")), "\n")
		if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
			t.Errorf("%T on %s ran:\n%s\nwant:\n%s", b, tc.root, strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
		}
	}
}

// TestNotInstalledAnswers: each query tool's "not installed" is false, and
// any other failure is the tool's message.
func TestNotInstalledAnswers(t *testing.T) {
	root := driverstest.OpenRoot(t, "/")
	for _, tc := range []struct {
		tool    string
		backend pkg.Backend
		notHere string // a script answering "not installed"
		broken  string // a script failing otherwise
	}{
		{"pacman", pkg.NewPacman(root),
			"echo \"error: package 'nginx' was not found\" >&2; exit 1",
			"echo 'error: could not open database' >&2; exit 1"},
		{"apk", pkg.NewApk(root),
			"exit 1",
			"echo 'ERROR: Unable to lock database' >&2; exit 99"},
		{"rpm", pkg.NewRPM(root),
			"echo 'package nginx is not installed'; exit 1",
			"echo 'error: cannot open Packages database' >&2; exit 1"},
		{"dpkg-query", pkg.NewDpkg(root, ""),
			"echo 'dpkg-query: no packages found matching nginx' >&2; exit 1",
			"echo 'dpkg-query: error: cannot read the database' >&2; exit 2"},
	} {
		fakeTools(t, map[string]string{tc.tool: tc.notHere})
		if ok, err := tc.backend.Installed(t.Context(), "nginx"); err != nil || ok {
			t.Errorf("%s answering not installed: Installed = %v, %v; want false, nil", tc.tool, ok, err)
		}
		fakeTools(t, map[string]string{tc.tool: tc.broken})
		ok, err := tc.backend.Installed(t.Context(), "nginx")
		if !errors.Is(err, drivers.ErrToolFailed) || ok {
			t.Errorf("%s failing: Installed = %v, %v; want drivers.ErrToolFailed", tc.tool, ok, err)
		} else if !strings.Contains(err.Error(), "database") || !strings.Contains(err.Error(), "exit code") {
			t.Errorf("%s failing: error %q does not carry the tool's message and exit code", tc.tool, err)
		}
	}
}

func TestDetect(t *testing.T) {
	root := driverstest.OpenRoot(t, t.TempDir())

	fakeTools(t, nil)
	b := pkg.Detect(root)
	_, err := b.Installed(t.Context(), "nginx")
	if !errors.Is(err, drivers.ErrToolMissing) {
		t.Fatalf("Detect with no manager on PATH: Installed = %v, want ErrToolMissing", err)
	}
	for _, tool := range []string{"dpkg-query", "pacman", "apk", "rpm"} {
		if !strings.Contains(err.Error(), tool) {
			t.Errorf("error %q does not name %s", err, tool)
		}
	}
	if err := b.Install(t.Context(), "nginx"); !errors.Is(err, drivers.ErrToolMissing) {
		t.Errorf("Install = %v, want ErrToolMissing", err)
	}
	if err := b.Remove(t.Context(), "nginx"); !errors.Is(err, drivers.ErrToolMissing) {
		t.Errorf("Remove = %v, want ErrToolMissing", err)
	}
	if _, err := pkg.New(root, pkg.Options{}).Apply(t.Context(), present("nginx")); !errors.Is(err, drivers.ErrToolMissing) {
		t.Errorf("driver Apply with no manager = %v, want ErrToolMissing", err)
	}

	fakeTools(t, map[string]string{"apk": recorder, "rpm": recorder})
	if b := pkg.Detect(root); func() bool { _, ok := b.(*pkg.Apk); return !ok }() {
		t.Errorf("Detect with apk and rpm on PATH, no database in the root = %T, want the first: *pkg.Apk", b)
	}
	if err := os.MkdirAll(root.Host("/var/lib/rpm"), 0o755); err != nil {
		t.Fatal(err)
	}
	if b := pkg.Detect(root); func() bool { _, ok := b.(*pkg.RPM); return !ok }() {
		t.Errorf("Detect with apk and rpm on PATH and an rpm database in the root = %T, want *pkg.RPM", b)
	}
}

// hang is a fake tool that records its pid and that of a child it starts,
// then waits for the child, which sleeps for ten minutes.
const hang = `/bin/sleep 600 &
echo "$$ $!" > "$FAKE_PIDS"
wait
`

// started waits for a hung fake tool to record its pids.
func started(t *testing.T, file string) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(file)
		if f := strings.Fields(string(data)); err == nil && len(f) == 2 {
			var pids []int
			for _, s := range f {
				pid, err := strconv.Atoi(s)
				if err != nil {
					t.Fatal(err)
				}
				pids = append(pids, pid)
			}
			return pids
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the fake tool did not start")
	return nil
}

// wantGone fails unless every pid is gone within a few seconds (a zombie
// nobody has reaped yet is gone all the same).
func wantGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for !dead(pid) {
			if time.Now().After(deadline) {
				t.Errorf("process %d still runs", pid)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func dead(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	s := string(stat)
	rest := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(rest) > 0 && rest[0] == "Z"
}

// TestTimeoutKillsTool: a tool that hangs is killed at Options.Timeout,
// and with it what it started; the error says it timed out.
func TestTimeoutKillsTool(t *testing.T) {
	fakeTools(t, map[string]string{"dpkg-query": hang})
	pidFile := filepath.Join(t.TempDir(), "pids")
	t.Setenv("FAKE_PIDS", pidFile)
	root := driverstest.OpenRoot(t, t.TempDir())
	d := pkg.New(root, pkg.Options{Backend: pkg.NewDpkg(root, ""), Timeout: 300 * time.Millisecond})

	start := time.Now()
	_, err := d.Observe(t.Context(), present("nginx"))
	took := time.Since(start)
	if !errors.Is(err, drivers.ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Observe with a hung tool: got %v, want drivers.ErrTimeout and context.DeadlineExceeded", err)
	}
	for _, want := range []string{"dpkg-query", "killed", "timed out after 300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if took > 4*time.Second {
		t.Errorf("Observe returned after %v, want soon after the 300ms timeout", took)
	}
	wantGone(t, started(t, pidFile))
}

// TestCancelKillsTool: cancelling the context while a tool runs kills it
// and returns an error wrapping context.Canceled.
func TestCancelKillsTool(t *testing.T) {
	fakeTools(t, map[string]string{"dpkg-query": hang})
	pidFile := filepath.Join(t.TempDir(), "pids")
	t.Setenv("FAKE_PIDS", pidFile)
	root := driverstest.OpenRoot(t, t.TempDir())
	d := pkg.New(root, pkg.Options{Backend: pkg.NewDpkg(root, "")})

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := d.Apply(ctx, present("nginx"))
		done <- err
	}()
	pids := started(t, pidFile)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || errors.Is(err, drivers.ErrTimeout) {
			t.Errorf("Apply cancelled while the tool runs: got %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Apply did not return after its context was cancelled")
	}
	wantGone(t, pids)
}

// TestToolEnvironment: tools run with stdin empty, no prompts and the C
// locale.
func TestToolEnvironment(t *testing.T) {
	out := filepath.Join(t.TempDir(), "env")
	t.Setenv("FAKE_OUT", out)
	t.Setenv("LC_ALL", "de_DE.UTF-8")
	fakeTools(t, map[string]string{"pacman": `echo "$DEBIAN_FRONTEND $LC_ALL $(/bin/cat | /usr/bin/wc -c)" > "$FAKE_OUT"`})
	if _, err := pkg.NewPacman(driverstest.OpenRoot(t, "/")).Installed(t.Context(), "nginx"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); strings.TrimSpace(string(got)) != "noninteractive C 0" {
		t.Errorf("the tool saw %q, want DEBIAN_FRONTEND=noninteractive, LC_ALL=C and an empty stdin", got)
	}
}

func TestInvalidSpecs(t *testing.T) {
	fakeTools(t, map[string]string{"dpkg-query": recorder})
	t.Setenv("FAKE_LOG", filepath.Join(t.TempDir(), "log"))
	d := pkg.New(driverstest.OpenRoot(t, t.TempDir()), pkg.Options{})
	for _, spec := range []*drivers.PackageSpec{
		{Name: ""},
		{Name: "-rf"},
		{Name: "ngin*"},
		{Name: "a b"},
		{Name: "../x"},
		{Name: "nginx", State: "latest"},
		nil,
	} {
		if _, err := d.Apply(t.Context(), spec); !errors.Is(err, drivers.ErrInvalidSpec) {
			t.Errorf("Apply(%+v) = %v, want ErrInvalidSpec", spec, err)
		}
	}
	if _, err := os.Stat(os.Getenv("FAKE_LOG")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a tool ran for an invalid spec")
	}
}

// virtual is a backend whose manager installs something else than the name
// asked for, as apt-get does for a virtual package.
type virtual struct{ installs int }

func (v *virtual) Installed(context.Context, string) (bool, error) { return false, nil }
func (v *virtual) Install(context.Context, string) error           { v.installs++; return nil }
func (v *virtual) Remove(context.Context, string) error            { return nil }

// TestVirtualPackage: a manager's success that leaves the name not
// installed is an error, not a Created every Apply would repeat.
func TestVirtualPackage(t *testing.T) {
	b := &virtual{}
	d := pkg.New(driverstest.OpenRoot(t, t.TempDir()), pkg.Options{Backend: b})
	_, err := d.Apply(t.Context(), present("awk"))
	if !errors.Is(err, pkg.ErrNotInstalled) || b.installs != 1 {
		t.Errorf("Apply of a virtual package = %v after %d installs, want ErrNotInstalled after 1", err, b.installs)
	}
}
