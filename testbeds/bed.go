// Package testbeds runs whole meshes for end-to-end tests and the demo: a
// real `meshctl serve` process on its embedded broker, and real `mesh-host
// serve` processes, each managing a root prefix of its own, with the faults
// the link must survive (a broker restarted, a host killed) one call away.
//
// Everything here drives the built binaries, as an operator would: the beds
// prove the programs, not the packages.
package testbeds

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds/buildprogress"
)

// TB is what a bed needs of a test or benchmark (testing.TB has it all), so
// that this package does not import testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Cleanup(func())
	TempDir() string
	Failed() bool
}

// Binaries are the two programs a bed runs.
type Binaries struct {
	MeshHost string
	Meshctl  string
}

// Build compiles both programs into dir, stripped and static as they ship,
// saying they are version.
func Build(dir, version string) (Binaries, error) {
	return BuildWithProgress(dir, version, nil)
}

// BuildWithProgress is Build telling progress, when progress is not nil:
// a line for every few packages compiled, since a first build compiles
// every dependency and takes minutes on a small machine.
func BuildWithProgress(dir, version string, progress io.Writer) (Binaries, error) {
	root, err := ModuleRoot()
	if err != nil {
		return Binaries{}, err
	}
	args := []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=" + version, "-o", dir + string(os.PathSeparator)}
	if progress != nil {
		args = append(args, "-v") // a package's path on stderr as it is compiled
	}
	cmd := exec.Command("go", append(args, "./cmd/mesh-host", "./cmd/meshctl")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out := new(bytes.Buffer) // everything said, for an error
	cmd.Stdout, cmd.Stderr = out, out
	if progress != nil {
		p := buildprogress.New(progress)
		out = &p.Out
		cmd.Stdout, cmd.Stderr = out, p
	}
	if err := cmd.Run(); err != nil {
		return Binaries{}, fmt.Errorf("go build: %v\n%s", err, out.String())
	}
	return Binaries{MeshHost: filepath.Join(dir, "mesh-host"), Meshctl: filepath.Join(dir, "meshctl")}, nil
}

// ModuleRoot is the directory of the mesh-host module, asked of the go
// command, so that a bed works from any directory inside it.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("find the module: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// Bed is one mesh: a control service and the hosts added to it.
type Bed struct {
	tb   TB
	bins Binaries
	// Dir holds everything of the bed: the control's data, each host's
	// root and state, and the processes' logs.
	Dir     string
	Control *Control
	// Cluster are the bed's NATS servers, when it runs on a cluster
	// (NewOnCluster); none when meshctl serve embeds its broker.
	Cluster []*NATSServer
	hosts   []*Host
}

// New starts a control service on a port of its own and returns the bed.
// Every process is stopped when the test ends; their logs are printed if
// it failed.
func New(tb TB, bins Binaries) *Bed {
	tb.Helper()
	b := &Bed{tb: tb, bins: bins, Dir: tb.TempDir()}
	b.Control = &Control{bed: b, DataDir: filepath.Join(b.Dir, "control"), Listen: freeAddr(tb)}
	tb.Cleanup(b.cleanup)
	b.Control.Start()
	return b
}

func (b *Bed) cleanup() {
	for _, h := range b.hosts {
		h.proc.kill()
	}
	b.Control.proc.kill()
	procs := append([]*process{&b.Control.proc}, hostProcs(b.hosts)...)
	for _, s := range b.Cluster {
		s.proc.kill()
		procs = append(procs, &s.proc)
	}
	if b.tb.Failed() {
		for _, p := range procs {
			if log, err := os.ReadFile(p.logPath); err == nil && len(log) > 0 {
				b.tb.Logf("---- log of %s ----\n%s", p.name, tail(log, 8000))
			}
		}
	}
}

func hostProcs(hs []*Host) []*process {
	out := make([]*process, len(hs))
	for i, h := range hs {
		out[i] = &h.proc
	}
	return out
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// freeAddr finds a loopback port nobody listens on. The control service
// keeps it across restarts, so hosts reconnect to the same URL.
func freeAddr(tb TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Result is what a command printed and how it exited.
type Result struct {
	Stdout, Stderr string
	Code           int
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
}

func run(bin string, args ...string) Result {
	cmd := exec.Command(bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := Result{Stdout: out.String(), Stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		r.Code, r.Stderr = -1, r.Stderr+err.Error()
	}
	return r
}

// Meshctl runs an operator command against the bed's control service.
func (b *Bed) Meshctl(args ...string) Result {
	return run(b.bins.Meshctl, append([]string{"--data", b.Control.DataDir}, args...)...)
}

// MustMeshctl runs an operator command and fails the test unless it exits 0.
func (b *Bed) MustMeshctl(args ...string) string {
	b.tb.Helper()
	r := b.Meshctl(args...)
	if r.Code != 0 {
		b.tb.Fatalf("meshctl %s: %s", strings.Join(args, " "), r)
	}
	return r.Stdout
}

// URL is the broker's client URL: TLS, with a certificate from the mesh's
// CA (CAFile).
func (b *Bed) URL() string { return "tls://" + b.Control.Listen }

// CAFile is the mesh's CA certificate: a test that speaks NATS directly
// trusts the broker by it, as the nodes do.
func (b *Bed) CAFile() string { return filepath.Join(b.Control.DataDir, "ca.pem") }

// CredsFile is the control user's credentials: a test that speaks NATS
// directly uses them, as the stock nats CLI would.
func (b *Bed) CredsFile() string { return filepath.Join(b.Control.DataDir, "control.creds") }

// DeclarationKey is the mesh's declaration key, read from the authority
// as meshctl reads it: a test that pushes by hand signs with it, as the
// control plane does.
func (b *Bed) DeclarationKey() (nkeys.KeyPair, error) {
	a, err := authority.Open(b.Control.DataDir)
	if err != nil {
		return nil, err
	}
	return a.DeclarationKey(), nil
}

// Control is the bed's `meshctl serve` process.
type Control struct {
	bed     *Bed
	DataDir string
	Listen  string
	// NATS are the brokers of a cluster it serves on (serve --nats);
	// none: it embeds one, listening on Listen.
	NATS []string
	// HTTPListen is where it serves the web view (serve --http-listen),
	// kept across restarts; "": nowhere.
	HTTPListen string
	proc       process
}

// NewWeb is New with the control's web view served on a loopback port
// of its own: plain HTTP at WebURL.
func NewWeb(tb TB, bins Binaries) *Bed {
	tb.Helper()
	b := &Bed{tb: tb, bins: bins, Dir: tb.TempDir()}
	b.Control = &Control{bed: b, DataDir: filepath.Join(b.Dir, "control"), Listen: freeAddr(tb), HTTPListen: freeAddr(tb)}
	tb.Cleanup(b.cleanup)
	b.Control.Start()
	return b
}

// WebURL is the web view's base URL ("http://127.0.0.1:PORT").
func (c *Control) WebURL() string { return "http://" + c.HTTPListen }

// WebToken is an operator's token for the web view, as `meshctl web
// token` prints it.
func (b *Bed) WebToken() string {
	b.tb.Helper()
	return strings.TrimSpace(b.MustMeshctl("web", "token", "--ttl", "1h"))
}

// Start starts `meshctl serve` and waits until it answers `meshctl nodes`.
func (c *Control) Start(extra ...string) {
	c.bed.tb.Helper()
	// Releases on a port of their own: beds and other tests run at once.
	args := []string{"--data", c.DataDir, "serve", "--listen", c.Listen, "--releases-listen", "127.0.0.1:0"}
	if len(c.NATS) > 0 {
		args = []string{"--data", c.DataDir, "--nats", strings.Join(c.NATS, ","), "serve", "--releases-listen", "127.0.0.1:0"}
	}
	if c.HTTPListen != "" {
		args = append(args, "--http-listen", c.HTTPListen)
	}
	args = append(args, extra...)
	c.proc.start(c.bed.tb, "meshctl", c.bed.bins.Meshctl, filepath.Join(c.bed.Dir, "meshctl.log"), args)
	Eventually(c.bed.tb, 30*time.Second, "the control service answers", func() error {
		if !c.proc.running() {
			return Fatal(fmt.Errorf("meshctl serve exited: %s", c.proc.exit()))
		}
		if r := c.bed.Meshctl("nodes"); r.Code != 0 {
			return errors.New(r.String())
		}
		return nil
	})
}

// Stop ends the control service with SIGTERM and waits for it.
func (c *Control) Stop() { c.proc.stop(c.bed.tb, 30*time.Second) }

// Restart stops and starts the control service and its broker, on the same
// port and data: what a broker restart looks like to the hosts.
func (c *Control) Restart() {
	c.bed.tb.Helper()
	c.Stop()
	c.Start()
}

// Host is one node of the bed: a root prefix, a state directory, and its
// `mesh-host serve` process when started.
type Host struct {
	bed      *Bed
	Name     string
	Root     string
	StateDir string
	// Hostname, when not "", is the machine's name as serve sees it:
	// serve runs in a UTS namespace of its own so named (root only).
	Hostname string
	proc     process
}

// AddHost enrols a node (meshctl enrol, then mesh-host enrol with the
// token: the node's key is made in its state directory, and the control
// service signs its credentials) with an empty root of its own. It is not
// started.
func (b *Bed) AddHost(name string) *Host { return b.AddMachine(name, name) }

// AddMachine is AddHost for a machine in directory dir of the bed enrolled
// as node: a second machine enrolled as a node already enrolled replaces
// it (its key is revoked).
func (b *Bed) AddMachine(dir, node string) *Host {
	b.tb.Helper()
	name := node
	h := &Host{bed: b, Name: name, Root: filepath.Join(b.Dir, dir, "root"), StateDir: filepath.Join(b.Dir, dir, "state")}
	if err := os.MkdirAll(filepath.Join(h.Root, "etc"), 0o755); err != nil {
		b.tb.Fatalf("%v", err)
	}
	token := strings.TrimSpace(b.MustMeshctl("enrol", name))
	cmd := exec.Command(b.bins.MeshHost, "--state-dir", h.StateDir, "enrol", "-")
	cmd.Stdin = strings.NewReader(token + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.tb.Fatalf("mesh-host enrol %s: %v\n%s", name, err, out)
	}
	b.hosts = append(b.hosts, h)
	return h
}

// Start starts `mesh-host serve` with extra serve flags and waits until its
// socket answers.
func (h *Host) Start(extra ...string) {
	h.bed.tb.Helper()
	args := append(h.global(), "serve")
	args = append(args, extra...)
	bin := h.bed.bins.MeshHost
	h.proc.ownUTS = h.Hostname != ""
	if h.Hostname != "" {
		// The namespace is made by the kernel at clone; its name is set
		// by writing it in the new namespace, before serve starts, by a
		// shell that then becomes serve (the same process, so the bed
		// stops and kills it as any other).
		args = append([]string{"-c", `printf %s "$0" >/proc/sys/kernel/hostname && exec "$@"`, h.Hostname, bin}, args...)
		bin = "/bin/sh"
	}
	h.proc.start(h.bed.tb, "mesh-host "+h.Name, bin, filepath.Join(h.bed.Dir, h.Name+".log"), args)
	Eventually(h.bed.tb, 30*time.Second, h.Name+" serves", func() error {
		if !h.proc.running() {
			return Fatal(fmt.Errorf("mesh-host serve exited: %s", h.proc.exit()))
		}
		if _, err := os.Stat(filepath.Join(h.StateDir, "control.sock")); err != nil {
			return err
		}
		if r := h.Run("status"); r.Code != 0 {
			return errors.New(r.String())
		}
		return nil
	})
}

// Stop sends SIGTERM and waits; it returns the exit code.
func (h *Host) Stop() int { return h.proc.stop(h.bed.tb, 90*time.Second) }

// Kill ends the host with SIGKILL, with anything it started (a launcher's
// serve): no chance to finish anything.
func (h *Host) Kill() { h.proc.kill() }

// Running reports whether the serve process is alive.
func (h *Host) Running() bool { return h.proc.running() }

// PID is the serve process's id.
func (h *Host) PID() int { return h.proc.pid() }

func (h *Host) global() []string {
	return []string{"--root", h.Root, "--state-dir", h.StateDir}
}

// Run runs a mesh-host command for this host (through its service when it
// runs, as a person would).
func (h *Host) Run(args ...string) Result {
	return run(h.bed.bins.MeshHost, append(h.global(), args...)...)
}

// JournalInfo is the host's journal's head, first record, acknowledged
// mark and size, as `mesh-host status --json` shows them. Like TryRecords
// it is for a poll: a host between two starts gives an error.
func (h *Host) JournalInfo() (journal.Info, error) {
	r := h.Run("status", "--json")
	if r.Code != 0 {
		return journal.Info{}, errors.New(r.String())
	}
	var st struct {
		Journal journal.Info `json:"journal"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &st); err != nil {
		return journal.Info{}, fmt.Errorf("status --json: %v: %s", err, r)
	}
	return st.Journal, nil
}

// Records is the host's whole journal, as `mesh-host journal --json` shows
// it.
func (h *Host) Records() []event.Record {
	h.bed.tb.Helper()
	recs, err := h.TryRecords()
	if err != nil {
		h.bed.tb.Fatalf("mesh-host journal --json: %v", err)
	}
	return recs
}

// TryRecords is Records for a poll: a host between two starts may hold its
// journal's lock or have no socket yet, which is an error, not a failure.
func (h *Host) TryRecords() ([]event.Record, error) {
	r := h.Run("journal", "--json")
	if r.Code != 0 {
		return nil, errors.New(r.String())
	}
	return DecodeRecords(r.Stdout)
}

// DecodeRecords reads JSON lines of records.
func DecodeRecords(s string) ([]event.Record, error) {
	var out []event.Record
	dec := json.NewDecoder(strings.NewReader(s))
	for dec.More() {
		var r event.Record
		if err := dec.Decode(&r); err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// process is one child of the bed.
type process struct {
	mu      sync.Mutex
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	state   *os.ProcessState
	// ownUTS starts the process in a UTS namespace of its own: its
	// hostname is then its own to set.
	ownUTS bool
}

func (p *process) start(tb TB, name, bin, logPath string, args []string) {
	tb.Helper()
	p.startEnv(tb, name, bin, logPath, args, nil)
}

// startEnv starts bin with env added to this process's environment.
func (p *process) startEnv(tb TB, name, bin, logPath string, args, env []string) {
	tb.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && p.done != nil {
		select {
		case <-p.done:
		default:
			tb.Fatalf("%s is already running", name)
		}
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	fmt.Fprintf(log, "==== %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	// A group of its own, which kill ends whole: a launcher's `mesh-host
	// serve` outlived the launcher killed at a test's end, for minutes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if p.ownUTS {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUTS
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		tb.Fatalf("start %s: %v", name, err)
	}
	p.name, p.logPath, p.cmd, p.done, p.state = name, logPath, cmd, make(chan struct{}), nil
	done := p.done
	go func() {
		_ = cmd.Wait()
		log.Close()
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		close(done)
	}()
}

func (p *process) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

func (p *process) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

func (p *process) exit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return "running"
	}
	return p.state.String()
}

// stop sends SIGTERM and waits up to limit; it returns the exit code.
func (p *process) stop(tb TB, limit time.Duration) int {
	tb.Helper()
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return 0
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		tb.Fatalf("%s did not stop within %s of SIGTERM", p.name, limit)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state.ExitCode()
}

// kill ends the process and every process it started (its process
// group) with SIGKILL, as systemd ends a unit's control group.
func (p *process) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
	<-done
}

// fatal marks a condition that can never become true: Eventually stops.
type fatal struct{ error }

// Fatal wraps err so Eventually gives up at once.
func Fatal(err error) error { return fatal{err} }

// Eventually polls cond until it returns nil, failing the test after
// timeout with the last error. A Fatal error fails it at once.
func Eventually(tb TB, timeout time.Duration, what string, cond func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	wait := 5 * time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		var f fatal
		if errors.As(err, &f) {
			tb.Fatalf("%s: %v", what, f.error)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		time.Sleep(wait)
		wait = min(wait*2, 200*time.Millisecond)
	}
}

// PID is the control service's process id.
func (c *Control) PID() int { return c.proc.pid() }

// Freeze stops the control service (and its broker) with SIGSTOP: its
// connections stay open and silent, the way a dead peer or a cut cable
// looks, which only pings can tell. Thaw resumes it.
func (c *Control) Freeze() { c.proc.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen control service.
func (c *Control) Thaw() { c.proc.signal(syscall.SIGCONT) }

func (p *process) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// NodeVersions is the running version of each node, as `meshctl nodes`
// shows it from the nodes' heartbeats ("" for a node never heard).
func (b *Bed) NodeVersions() (map[string]string, error) {
	r := b.Meshctl("nodes", "--json")
	if r.Code != 0 {
		return nil, errors.New(r.String())
	}
	nodes, err := JSONLines[struct {
		Node      string `json:"node"`
		Heartbeat struct {
			Version string `json:"version"`
		} `json:"heartbeat"`
	}](r.Stdout)
	if err != nil {
		return nil, fmt.Errorf("meshctl nodes --json: %v: %s", err, r.Stdout)
	}
	out := make(map[string]string, len(nodes))
	for _, n := range nodes {
		out[n.Node] = n.Heartbeat.Version
	}
	return out, nil
}

// JSONLines decodes out, JSON lines (what --json prints), one T a line.
func JSONLines[T any](out string) ([]T, error) {
	var all []T
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			return all, err
		}
		all = append(all, v)
	}
	return all, nil
}
