package testbeds

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/upgrade"
)

// VersionsDir is where a host's versions live, under its root: the path
// a release's archive resource names.
const VersionsDir = "/opt/mesh-host/versions"

// Release is a host build packed as a release archive: a tar.gz holding
// mesh-host at its top, made with the real tar.
type Release struct {
	Path   string // the archive, on this machine
	Source string // the file source naming it beneath the root it was packed into
	Digest string // sha256:HEX of the archive
}

// Version is the name of the directory the release unpacks into: the
// archive's digest, which is what ${version} expands to.
func (r Release) Version() string { return strings.TrimPrefix(r.Digest, "sha256:") }

// ReleasesDir is where, beneath a host's root, Pack puts release archives:
// a file source names a file beneath the root.
const ReleasesDir = "/srv/releases"

// Pack makes a release archive of the executable bin in root's
// ReleasesDir, so that a host whose root is root fetches it from its
// file source.
func Pack(bin, root string) (Release, error) {
	dir := filepath.Join(root, ReleasesDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Release{}, err
	}
	stage, err := os.MkdirTemp(dir, "pack-")
	if err != nil {
		return Release{}, err
	}
	defer os.RemoveAll(stage)
	if err := CopyFile(bin, filepath.Join(stage, "mesh-host"), 0o755); err != nil {
		return Release{}, err
	}
	f, err := os.CreateTemp(dir, "release-*.tar.gz")
	if err != nil {
		return Release{}, err
	}
	f.Close()
	if out, err := exec.Command("tar", "-czf", f.Name(), "-C", stage, "mesh-host").CombinedOutput(); err != nil {
		return Release{}, fmt.Errorf("tar: %v\n%s", err, out)
	}
	sum, err := upgrade.FileDigest(f.Name())
	if err != nil {
		return Release{}, err
	}
	return Release{Path: f.Name(), Source: "file://" + ReleasesDir + "/" + filepath.Base(f.Name()), Digest: "sha256:" + sum}, nil
}

// ArchiveYAML is the declaration resource that delivers r.
func (r Release) ArchiveYAML() string {
	return fmt.Sprintf("  - archive: {path: \"%s/${version}\", source: %q, digest: %q, format: tar.gz}\n", VersionsDir, r.Source, r.Digest)
}

// Install puts the executable bin into h's versions directory as the first
// version, as the package's install step does: a directory named for its
// digest, with an arrival marker after everything else. It returns the
// version's name.
func (h *Host) Install(bin string) (string, error) {
	sum, err := upgrade.FileDigest(bin)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(h.Root, VersionsDir, sum)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := CopyFile(bin, filepath.Join(dir, "mesh-host"), 0o755); err != nil {
		return "", err
	}
	marker := fmt.Sprintf("%s 1\n", time.Now().UTC().Format("2006-01-02T15:04:05.000000000Z"))
	return sum, os.WriteFile(filepath.Join(dir, ".mesh-host-arrived"), []byte(marker), 0o644)
}

// StartLauncher runs h under the launcher script (sh launcher), as the
// unit does, with the launcher's environment pointing into h's root and
// state; extra are environment settings of the test. It does not wait: a
// launched host may be meant to fail.
func (h *Host) StartLauncher(launcher string, extra ...string) {
	h.bed.tb.Helper()
	h.proc.startEnv(h.bed.tb, "launcher "+h.Name, "sh", filepath.Join(h.bed.Dir, h.Name+".log"),
		[]string{launcher, "--root", h.Root},
		append([]string{
			"MESH_HOST_VERSIONS=" + filepath.Join(h.Root, VersionsDir),
			"MESH_HOST_STATE_DIR=" + h.StateDir,
		}, extra...))
}

// Wait waits for the host's process (the launcher, when launched) to end
// and returns its exit code.
func (h *Host) Wait(limit time.Duration) (int, error) {
	h.proc.mu.Lock()
	done := h.proc.done
	h.proc.mu.Unlock()
	if done == nil {
		return 0, fmt.Errorf("%s was never started", h.Name)
	}
	select {
	case <-done:
	case <-time.After(limit):
		return 0, fmt.Errorf("%s still runs after %s", h.Name, limit)
	}
	h.proc.mu.Lock()
	defer h.proc.mu.Unlock()
	return h.proc.state.ExitCode(), nil
}

// Log is what h's processes have printed so far.
func (h *Host) Log() string {
	b, _ := os.ReadFile(filepath.Join(h.bed.Dir, h.Name+".log"))
	return string(b)
}

// CopyFile copies the file from to a new file to, of mode mode.
func CopyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
