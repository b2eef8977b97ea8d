package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/testbeds"
)

// contender is one tool as the rows drive it: a first apply into an empty
// root, and a run over a root that already matches (which must change
// nothing).
type contender interface {
	name() string
	root() string
	// reset empties the tool's root and any state it keeps for it.
	reset() error
	apply() (sample, error)
	noop() (sample, error)
}

// cfengine is `cf-agent -K -f POLICY`: -K so that no lock from the run
// before makes it skip promises.
type cfengine struct {
	agent, policy, dir string
	// synced is how long `sync -f` took after each apply: cf-agent writes
	// files in place and calls no fsync on them, so this is what it
	// would take to make an apply as durable as mesh-host's.
	synced []time.Duration
}

func (c *cfengine) name() string { return "CFEngine" }
func (c *cfengine) root() string { return c.dir }
func (c *cfengine) reset() error { return resetRoot(c.dir) }

func (c *cfengine) apply() (sample, error) {
	s, err := c.noop()
	if err != nil {
		return s, err
	}
	start := time.Now()
	if out, err := exec.Command("sync", "-f", c.dir).CombinedOutput(); err != nil {
		return s, fmt.Errorf("sync -f %s: %v: %s", c.dir, err, out)
	}
	c.synced = append(c.synced, time.Since(start))
	return s, nil
}

func (c *cfengine) noop() (sample, error) {
	s, _, err := timed(c.agent, "-K", "-f", c.policy)
	return s, err
}

// meshHost is the mesh-host binary built from this tree, on a root and
// state directory of its own.
type meshHost struct {
	bin, decl, dir, state string
}

func (m *meshHost) name() string { return "mesh-host" }
func (m *meshHost) root() string { return m.dir }

func (m *meshHost) reset() error {
	if err := setAside(m.state); err != nil {
		return err
	}
	return resetRoot(m.dir)
}

func (m *meshHost) args(cmd ...string) []string {
	return append([]string{"--root", m.dir, "--state-dir", m.state}, cmd...)
}

func (m *meshHost) apply() (sample, error) {
	s, _, err := timed(m.bin, m.args("apply", m.decl)...)
	return s, err
}

func (m *meshHost) noop() (sample, error) {
	s, out, err := timed(m.bin, m.args("check")...)
	if err == nil && !strings.Contains(out, "nothing drifted") {
		err = fmt.Errorf("mesh-host check found drift on a converged root: %s", lastLines(out, 3))
	}
	return s, err
}

func (m *meshHost) journal() string { return filepath.Join(m.state, "journal.db") }

// buildMeshHost builds the mesh-host command of the module the program runs
// in, into dir, as it ships (testbeds.Build: static and stripped). A build
// linked to libc maps libc and its loader too, some 1.3 MB more resident
// that no installed host has.
func buildMeshHost(dir string) (string, error) {
	bins, err := testbeds.Build(dir, "versus")
	return bins.MeshHost, err
}

// findAgent returns the path of the agent named, installing Debian's
// cfengine3 first when asked to and it is missing. "" means no CFEngine:
// the rows are measured for mesh-host alone.
func findAgent(name string, install bool) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if !install {
		return "", nil
	}
	cmd := exec.Command("apt-get", "install", "-y", "cfengine3")
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("apt-get install -y cfengine3: %w", err)
	}
	return exec.LookPath(name)
}
