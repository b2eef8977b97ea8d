package packaging_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/packaging"
	"github.com/mesh-host/mesh-host/upgrade"
)

var scripts = []string{"arrive.sh", "install.sh", "postinstall.sh", "preremove.sh"}

// TestShellcheck: the scripts are POSIX sh that shellcheck finds nothing
// in. CI installs shellcheck (Debian package shellcheck).
func TestShellcheck(t *testing.T) {
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Skipf("shellcheck is not installed (Debian package shellcheck): %v", err)
	}
	out, err := exec.Command("shellcheck", append([]string{"--shell=sh", "--severity=style"}, scripts...)...).CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}

// TestEmbedded: what the builder ships is the files beside this package.
func TestEmbedded(t *testing.T) {
	for name, got := range map[string][]byte{
		"mesh-host.service": packaging.Unit,
		"install.sh":        packaging.InstallScript,
		"arrive.sh":         packaging.Arrive,
		"postinstall.sh":    packaging.PostInstall,
		"preremove.sh":      packaging.PreRemove,
	} {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("embedded %s differs from the file", name)
		}
	}
	if !bytes.Contains(packaging.Unit, []byte("\nExecStart="+packaging.LauncherPath+"\n")) {
		t.Errorf("the unit does not run the launcher at %s", packaging.LauncherPath)
	}
	// The launcher's halt is final: restarting cannot help.
	if !bytes.Contains(packaging.Unit, []byte("\nRestartPreventExitStatus="+strconv.Itoa(upgrade.HaltStatus)+"\n")) {
		t.Errorf("the unit does not prevent a restart after the launcher's halt status %d", upgrade.HaltStatus)
	}
}

var markerRE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z (\d+)\n$`)

// arrive runs the real arrive.sh and returns the version it prints.
func arrive(t *testing.T, bin, versions string) string {
	t.Helper()
	out, err := exec.Command("sh", "arrive.sh", bin, versions).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("arrive.sh %s %s: %v\n%s", bin, versions, err, stderr)
	}
	return strings.TrimSpace(string(out))
}

// counter checks the arrival marker of versions/name and returns its
// counter.
func counter(t *testing.T, versions, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(versions, name, packaging.ArrivedFile))
	if err != nil {
		t.Fatal(err)
	}
	m := markerRE.FindSubmatch(b)
	if m == nil {
		t.Fatalf("marker of %s is %q, want \"RFC3339-nano-UTC COUNTER\\n\"", name, b)
	}
	return string(m[1])
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// TestArrive: a version arrives with a counter one above its siblings',
// once; a half-made version directory is made again.
func TestArrive(t *testing.T) {
	dir := t.TempDir()
	versions := filepath.Join(dir, "versions")
	bin := filepath.Join(dir, "mesh-host")
	write(t, bin, "#!/bin/sh\necho one\n", 0o755)
	// Siblings: one arrived seventh, one whose marker is not a marker, one
	// whose counter is too long for sh to compare (the launcher ignores
	// it too), a staging directory (dot name) whose counter must not
	// count, and a file.
	write(t, filepath.Join(versions, "aaa", packaging.ArrivedFile), "2026-01-01T00:00:00.000000000Z 7\n", 0o644)
	write(t, filepath.Join(versions, "bbb", packaging.ArrivedFile), "garbage\n", 0o644)
	write(t, filepath.Join(versions, "ccc", packaging.ArrivedFile), "2026-01-01T00:00:00.000000000Z 9999999999999999999\n", 0o644)
	write(t, filepath.Join(versions, ".stage", packaging.ArrivedFile), "2026-01-01T00:00:00.000000000Z 99\n", 0o644)
	write(t, filepath.Join(versions, "note"), "", 0o644)

	version := arrive(t, bin, versions)
	sum, err := exec.Command("sha256sum", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Fields(string(sum))[0]; version != want {
		t.Fatalf("arrive printed %q, want the binary's sha256 %s", version, want)
	}
	if got := counter(t, versions, version); got != "8" {
		t.Errorf("counter %s, want 8 (one above aaa's 7)", got)
	}
	fi, err := os.Stat(filepath.Join(versions, version, "mesh-host"))
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("versions/%s/mesh-host: %v, %v; want mode 0755", version, fi, err)
	}
	if fi, err := os.Stat(filepath.Join(versions, version)); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("versions/%s: %v, %v; want mode 0755", version, fi, err)
	}
	before, _ := os.ReadFile(filepath.Join(versions, version, packaging.ArrivedFile))

	// Again: the same version, left as it was.
	if again := arrive(t, bin, versions); again != version {
		t.Errorf("second arrive printed %s, want %s", again, version)
	}
	if after, _ := os.ReadFile(filepath.Join(versions, version, packaging.ArrivedFile)); !bytes.Equal(before, after) {
		t.Errorf("second arrive rewrote the marker: %q, then %q", before, after)
	}

	// Half made (the marker never written): made again, arriving anew.
	if err := os.Remove(filepath.Join(versions, version, packaging.ArrivedFile)); err != nil {
		t.Fatal(err)
	}
	arrive(t, bin, versions)
	if got := counter(t, versions, version); got != "8" {
		t.Errorf("counter after repair %s, want 8", got)
	}

	// A second binary arrives after the first.
	bin2 := filepath.Join(dir, "mesh-host-2")
	write(t, bin2, "#!/bin/sh\necho two\n", 0o755)
	v2 := arrive(t, bin2, versions)
	if got := counter(t, versions, v2); got != "9" {
		t.Errorf("second version's counter %s, want 9", got)
	}

	entries, err := os.ReadDir(versions)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".mesh-host-arrive-") {
			t.Errorf("staging directory %s left behind", e.Name())
		}
	}
}
