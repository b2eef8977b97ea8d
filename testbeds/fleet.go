package testbeds

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// BuildFleetRunner compiles the many-hosts runner into dir and returns
// its path: cmd/mesh-host's test binary, named mesh-host-fleet, which runs
// one real `mesh-host serve` a node in one process (cmd/mesh-host
// fleet_test.go says how), saying it is version.
func BuildFleetRunner(dir, version string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "mesh-host-fleet")
	// A test binary's package main is linked under its import path.
	ldflags := "-s -w -X github.com/mesh-host/mesh-host/cmd/mesh-host.version=" + version
	cmd := exec.Command("go", "test", "-c", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/mesh-host")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c ./cmd/mesh-host: %v\n%s", err, b)
	}
	return out, nil
}

// Fleet is many nodes of a bed, run by the many-hosts runner: each a real
// `mesh-host serve` with its own root, journal, key, credentials and
// connection, many to a process.
type Fleet struct {
	// Nodes are the nodes' names, in order.
	Nodes []string
	Dir   string
	procs []*process
}

// FleetOptions say how a fleet runs.
type FleetOptions struct {
	// PerProcess is how many hosts one runner process holds (default all).
	PerProcess int
	// Prefix names the nodes Prefix-00000 on (default "fleet").
	Prefix string
	// Dir holds the hosts' roots, journals and logs, in a directory of
	// their own made there (default the bed's directory, in Prefix). A
	// fleet's hosts each write to a disk of their own; on one machine they
	// share one, whose flushes then bound a rollout, so a benchmark may
	// put them elsewhere (tmpfs) and keep the control service on the real
	// disk.
	Dir string
	// Serve are flags for every host's serve.
	Serve []string
	// NoFile is the runner's RLIMIT_NOFILE (default FleetNoFilePerHost a
	// host and FleetNoFileMargin more), at most the hard limit unless the
	// runner may raise that.
	NoFile uint64
}

// A host holds four descriptors (its connection, journal, socket and root
// prefix), and more while it applies (the file staged, its directory):
// thousands applying at once in one process need more than four each.
const (
	FleetNoFilePerHost = 8
	FleetNoFileMargin  = 1024
)

// StartFleet enrols n nodes with one `meshctl enrol --batch`, starts the
// runner processes and waits until every one has started its hosts (not
// until they are linked: see WaitNodes). They are stopped when the test
// ends.
func (b *Bed) StartFleet(runner string, n int, o FleetOptions) *Fleet {
	b.tb.Helper()
	if o.PerProcess <= 0 || o.PerProcess > n {
		o.PerProcess = n
	}
	if o.Prefix == "" {
		o.Prefix = "fleet"
	}
	if o.NoFile == 0 {
		o.NoFile = uint64(FleetNoFilePerHost*o.PerProcess + FleetNoFileMargin)
	}
	f := &Fleet{Dir: filepath.Join(b.Dir, o.Prefix)}
	if o.Dir == "" {
		if err := os.MkdirAll(f.Dir, 0o755); err != nil {
			b.tb.Fatalf("%v", err)
		}
	} else {
		// Beside the bed's: its own, removed once the hosts stop (the
		// cleanups run in reverse).
		dir, err := os.MkdirTemp(o.Dir, o.Prefix+"-")
		if err != nil {
			b.tb.Fatalf("%v", err)
		}
		b.tb.Cleanup(func() { os.RemoveAll(dir) })
		f.Dir = dir
	}
	var batch strings.Builder
	for i := range n {
		f.Nodes = append(f.Nodes, fmt.Sprintf("%s-%05d", o.Prefix, i))
		fmt.Fprintln(&batch, f.Nodes[i])
	}
	batchFile := filepath.Join(f.Dir, "batch.txt")
	if err := os.WriteFile(batchFile, []byte(batch.String()), 0o600); err != nil {
		b.tb.Fatalf("%v", err)
	}
	tokens := strings.SplitAfter(strings.TrimSuffix(b.MustMeshctl("enrol", "--batch", batchFile), "\n"), "\n")
	if len(tokens) != n {
		b.tb.Fatalf("meshctl enrol --batch: %d tokens for %d nodes", len(tokens), n)
	}
	b.tb.Cleanup(f.stop)
	for i := 0; i < n; i += o.PerProcess {
		part := filepath.Join(f.Dir, fmt.Sprintf("tokens-%d.txt", len(f.procs)))
		if err := os.WriteFile(part, []byte(strings.Join(tokens[i:min(i+o.PerProcess, n)], "")), 0o600); err != nil {
			b.tb.Fatalf("%v", err)
		}
		args := []string{"-dir", f.Dir, "-tokens", part, "-nofile", fmt.Sprint(o.NoFile)}
		for _, s := range o.Serve {
			args = append(args, "-serve-arg", s)
		}
		p := &process{}
		p.start(b.tb, fmt.Sprintf("mesh-host-fleet %d", len(f.procs)), runner, filepath.Join(f.Dir, fmt.Sprintf("runner-%d.log", len(f.procs))), args)
		f.procs = append(f.procs, p)
	}
	for _, p := range f.procs {
		// Enrolling and linking take tens of milliseconds a host of the
		// small machine's time, more when it is busy.
		Eventually(b.tb, time.Duration(n)*100*time.Millisecond+2*time.Minute, p.name+" starts its hosts", func() error {
			log, _ := os.ReadFile(p.logPath)
			if !p.running() {
				return Fatal(fmt.Errorf("%s exited: %s\n%s", p.name, p.exit(), tail(log, 4000)))
			}
			if !bytes.Contains(log, []byte("\nstarted ")) {
				return fmt.Errorf("not yet: %s", tail(log, 200))
			}
			return nil
		})
	}
	return f
}

// PIDs are the runner processes'.
func (f *Fleet) PIDs() []int {
	var out []int
	for _, p := range f.procs {
		out = append(out, p.pid())
	}
	return out
}

// Signal sends sig to every runner process.
func (f *Fleet) Signal(sig syscall.Signal) {
	for _, p := range f.procs {
		p.signal(sig)
	}
}

func (f *Fleet) stop() {
	for _, p := range f.procs {
		if p.cmd != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range f.procs {
		select {
		case <-p.done:
		case <-time.After(2 * time.Minute):
			p.kill()
		}
	}
}
