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
	// repair is a run over a root some of whose files were changed by
	// hand: the same run as noop for the others, `check` for mesh-host.
	repair() (sample, error)
}

// syncer measures, after each apply of a tool that does not make its
// writes durable itself, how long `sync -f` on its root takes: what it
// would take to make the apply as durable as mesh-host's, whose apply
// flushes what it wrote before it exits.
type syncer struct{ synced []time.Duration }

// syncedRun is run, timed, then `sync -f` on dir, timed apart.
func (s *syncer) syncedRun(run func() (sample, error), dir string) (sample, error) {
	smp, err := run()
	if err != nil {
		return smp, err
	}
	start := time.Now()
	if out, err := exec.Command("sync", "-f", dir).CombinedOutput(); err != nil {
		return smp, fmt.Errorf("sync -f %s: %v: %s", dir, err, out)
	}
	s.synced = append(s.synced, time.Since(start))
	return smp, nil
}

func (s *syncer) syncs() []time.Duration { return s.synced }

// cfengine is `cf-agent -K -f POLICY`: -K so that no lock from the run
// before makes it skip promises. It writes files in place and calls no
// fsync on them.
type cfengine struct {
	agent, policy, dir string
	syncer
}

func (c *cfengine) name() string { return "CFEngine" }
func (c *cfengine) root() string { return c.dir }
func (c *cfengine) reset() error { return resetRoot(c.dir) }

func (c *cfengine) apply() (sample, error) { return c.syncedRun(c.noop, c.dir) }

func (c *cfengine) repair() (sample, error) { return c.noop() }

func (c *cfengine) noop() (sample, error) {
	s, _, err := timed(c.agent, "-K", "-f", c.policy)
	return s, err
}

// puppet is `puppet apply MANIFEST`, masterless, with its configuration,
// state and logs in a directory of its own (state), so that it neither
// reads nor writes the machine's /etc/puppet or /var/lib/puppet.
type puppet struct {
	bin, manifest, dir, state string
	syncer
}

func (p *puppet) name() string { return "Puppet" }
func (p *puppet) root() string { return p.dir }

func (p *puppet) reset() error { return resetWithState(p.dir, p.state) }

func (p *puppet) apply() (sample, error) { return p.syncedRun(p.noop, p.dir) }

func (p *puppet) repair() (sample, error) { return p.noop() }

func (p *puppet) noop() (sample, error) {
	s, _, err := timed(p.bin, "apply", "--color=false",
		"--confdir", filepath.Join(p.state, "conf"), "--vardir", filepath.Join(p.state, "var"),
		"--logdir", filepath.Join(p.state, "log"), "--codedir", filepath.Join(p.state, "code"),
		"--rundir", filepath.Join(p.state, "run"), p.manifest)
	return s, err
}

// meshHost is the mesh-host binary built from this tree, on a root and
// state directory of its own.
type meshHost struct {
	bin, decl, dir, state string
}

func (m *meshHost) name() string { return "mesh-host" }
func (m *meshHost) root() string { return m.dir }

func (m *meshHost) reset() error { return resetWithState(m.dir, m.state) }

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

// repair is `check`, which repairs by default; it must have found the
// drift it repairs.
func (m *meshHost) repair() (sample, error) {
	s, out, err := timed(m.bin, m.args("check")...)
	if err == nil && strings.Contains(out, "nothing drifted") {
		err = fmt.Errorf("mesh-host check found no drift on a root changed by hand: %s", lastLines(out, 3))
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

// findTool returns the path of the command named, installing Debian's
// package pkg first when asked to and it is missing. "" means the tool is
// missing: its columns say so.
func findTool(name, pkg string, install bool) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if !install {
		return "", nil
	}
	cmd := exec.Command("apt-get", "install", "-y", pkg)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("apt-get install -y %s: %w", pkg, err)
	}
	return exec.LookPath(name)
}
