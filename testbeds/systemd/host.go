package systemd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/packaging"
	"github.com/mesh-host/mesh-host/testbeds"
	"github.com/mesh-host/mesh-host/upgrade"
)

// Packages are the host's release artifacts for this machine's
// architecture, made by the project's own builder (packaging/build).
type Packages struct {
	Version string // the build's label, what mesh-host --version says
	Deb     string
	// Release is mesh-host alone, for `meshctl release`.
	Release string
	// Binary is the binary every artifact holds.
	Binary string
}

// BuildPackages runs `go run ./packaging/build --version version --out
// dir`. (The builder makes every format; it has no way to make the .deb
// alone, and the rest costs seconds.)
func BuildPackages(dir, version string) (Packages, error) {
	module, err := testbeds.ModuleRoot()
	if err != nil {
		return Packages{}, err
	}
	cmd := exec.Command("go", "run", "./packaging/build", "--version", version, "--out", dir)
	cmd.Dir = module
	if out, err := cmd.CombinedOutput(); err != nil {
		return Packages{}, fmt.Errorf("packaging/build: %w\n%s", err, out)
	}
	// The builder builds for this machine's architecture unless told.
	base := filepath.Join(dir, "mesh-host-"+version+"-linux-"+runtime.GOARCH)
	p := Packages{Version: version, Binary: base, Release: base + ".release.tar.gz"}
	debs, _ := filepath.Glob(filepath.Join(dir, "mesh-host_*.deb"))
	if len(debs) != 1 {
		return p, fmt.Errorf("packaging/build wrote %d .debs in %s, want 1: %v", len(debs), dir, debs)
	}
	p.Deb = debs[0]
	for _, f := range []string{p.Binary, p.Release} {
		if _, err := os.Stat(f); err != nil {
			return p, fmt.Errorf("packaging/build: %w", err)
		}
	}
	return p, nil
}

// UnitName is the host's unit.
const UnitName = packaging.UnitName

// Host is mesh-host installed in a container from its package, enrolled
// as a node of a bed's mesh and run by its unit.
type Host struct {
	*Container
	Bed  *testbeds.Bed
	Node string
	// Installed is the version the package installed: the name of its
	// directory in /opt/mesh-host/versions, the binary's sha256.
	Installed string
}

// InstallHost does in c what the install guide says a person does:
// dpkg -i the package (its postinstall makes the shipped binary the
// first version and enables the unit), `mesh-host enrol TOKEN` with a
// token `meshctl enrol NODE` printed on this machine, then `systemctl
// restart mesh-host`. It returns once the unit is active and the mesh
// hears the node run the installed version.
func InstallHost(tb TB, c *Container, bed *testbeds.Bed, pkgs Packages, node string) *Host {
	tb.Helper()
	sum, err := upgrade.FileDigest(pkgs.Binary)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	h := &Host{Container: c, Bed: bed, Node: node, Installed: sum}
	deb := filepath.Join(c.Share, filepath.Base(pkgs.Deb))
	if err := testbeds.CopyFile(pkgs.Deb, deb, 0o644); err != nil {
		tb.Fatalf("%v", err)
	}
	out := c.MustExec("dpkg", "--install", path.Join(SharePath, filepath.Base(deb)))
	if !strings.Contains(out, "version "+sum) {
		tb.Fatalf("the package's postinstall did not install version %s:\n%s", sum, out)
	}
	if got := strings.TrimSpace(c.Try("systemctl", "is-enabled", UnitName).Stdout); got != "enabled" {
		tb.Fatalf("after dpkg -i, %s is %q, want enabled (the postinstall enables it)", UnitName, got)
	}
	token := strings.TrimSpace(bed.MustMeshctl("enrol", node))
	ctx, cancel := context.WithTimeout(context.Background(), ExecLimit)
	defer cancel()
	r, err := c.Run(ctx, Cmd{Args: []string{"mesh-host", "enrol", "-"}, Stdin: strings.NewReader(token + "\n")})
	if err != nil || r.Code != 0 {
		tb.Fatalf("mesh-host enrol in %s: %v %s", c.Name, err, r)
	}
	c.MustExec("systemctl", "restart", UnitName)
	h.WaitVersion(tb, sum)
	return h
}

// Mesh runs a mesh-host command inside, as root at a shell would (through
// the service's socket when it runs).
func (h *Host) Mesh(args ...string) testbeds.Result {
	return h.Try(append([]string{"mesh-host"}, args...)...)
}

// Records is the host's journal, from `mesh-host journal --json` inside;
// an error (the host between two starts) is for a poll.
func (h *Host) Records() ([]event.Record, error) {
	r := h.Mesh("journal", "--json")
	if r.Code != 0 {
		return nil, errors.New(r.String())
	}
	return testbeds.DecodeRecords(r.Stdout)
}

// UnitState is what systemd says of the host's unit.
type UnitState struct {
	ActiveState, SubState, Result string
	// MainPID is the launcher's pid, as the container numbers it.
	MainPID        int
	ExecMainStatus int
	NRestarts      int
}

// Unit asks systemd for the unit's state.
func (h *Host) Unit() (UnitState, error) {
	r := h.Try("systemctl", "show", "--property=ActiveState,SubState,Result,MainPID,ExecMainStatus,NRestarts", UnitName)
	if r.Code != 0 {
		return UnitState{}, errors.New(r.String())
	}
	var u UnitState
	for line := range strings.Lines(r.Stdout) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		n, _ := strconv.Atoi(v)
		switch k {
		case "ActiveState":
			u.ActiveState = v
		case "SubState":
			u.SubState = v
		case "Result":
			u.Result = v
		case "MainPID":
			u.MainPID = n
		case "ExecMainStatus":
			u.ExecMainStatus = n
		case "NRestarts":
			u.NRestarts = n
		}
	}
	return u, nil
}

// Processes are the unit's launcher and the host it runs, as this machine
// numbers them (for a signal from here). Serve is 0 between two starts.
func (h *Host) Processes() (launcher, serve int, err error) {
	u, err := h.Unit()
	if err != nil {
		return 0, 0, err
	}
	if u.MainPID == 0 {
		return 0, 0, fmt.Errorf("%s has no main process (%s/%s)", UnitName, u.ActiveState, u.SubState)
	}
	if launcher, err = h.HostPID(u.MainPID); err != nil {
		return 0, 0, err
	}
	kids, err := testbeds.HostChildren(launcher)
	if err != nil {
		return launcher, 0, err
	}
	switch len(kids) {
	case 0:
		return launcher, 0, nil
	case 1:
		return launcher, kids[0], nil
	}
	return launcher, 0, fmt.Errorf("the launcher runs %d hosts: %v", len(kids), kids)
}

// StateFile is a file of the host's state directory (known-good,
// launcher/failures...), "" when there is none.
func (h *Host) StateFile(name string) string {
	r := h.Try("cat", path.Join(packaging.StateDir, name))
	if r.Code != 0 {
		return ""
	}
	return strings.TrimSpace(r.Stdout)
}

// WaitVersion waits until the mesh hears the node run version.
func (h *Host) WaitVersion(tb TB, version string) {
	tb.Helper()
	testbeds.Eventually(tb, 60*time.Second, h.Node+" reports version "+version, func() error {
		vs, err := h.Bed.NodeVersions()
		if err != nil {
			return err
		}
		if got := vs[h.Node]; got != version {
			return fmt.Errorf("%s reports %q; unit journal:\n%s", h.Node, got, h.Journal(20, UnitName))
		}
		return nil
	})
}

// Declare declares files to the node at revision rev (meshctl declare)
// and waits until the host has applied them and its version is
// confirmed: known-good names it and no failed start is counted.
func (h *Host) Declare(tb TB, rev uint64, files testbeds.Files) {
	tb.Helper()
	h.Bed.MustMeshctl("declare", h.Node, h.Bed.Declare(h.Node, rev, files))
	testbeds.Eventually(tb, 60*time.Second, h.Node+" confirms its version", func() error {
		for p, want := range files {
			if got := h.Try("cat", p); got.Stdout != want {
				return fmt.Errorf("%s holds %q", p, got.Stdout)
			}
		}
		run, _ := h.Bed.NodeVersions()
		if kg := h.StateFile("known-good"); kg == "" || kg != run[h.Node] {
			return fmt.Errorf("known-good is %q, running %q", kg, run[h.Node])
		}
		if f := h.StateFile("launcher/failures"); f != "" {
			return fmt.Errorf("failed starts counted: %s", f)
		}
		return nil
	})
}

// RecordJSON is a record as JSON, to compare two reads of a journal.
func RecordJSON(r event.Record) string {
	b, err := json.Marshal(r)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}
