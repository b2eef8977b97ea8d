package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/internal/promtest"
)

// metricsServe is a `mesh-host serve --metrics-listen` process on a
// sandbox root.
type metricsServe struct {
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	url    string
	exited chan error
}

// freeAddr is a loopback address nothing listens on, as far as can be
// known.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// startMetricsServe starts serve with metrics on addr (off when empty)
// and waits for its socket.
func startMetricsServe(t testing.TB, bin string, global []string, state, addr string) *metricsServe {
	t.Helper()
	args := append(append([]string{}, global...), "serve", "--drift-interval", "1h")
	if addr != "" {
		args = append(args, "--metrics-listen", addr)
	}
	s := &metricsServe{cmd: exec.Command(bin, args...), stderr: new(bytes.Buffer), url: "http://" + addr + "/metrics", exited: make(chan error, 1)}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.exited <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop(t) })
	basetest.Eventually(t, 60*time.Second, func() error {
		select {
		case err := <-s.exited:
			s.exited <- err
			t.Fatalf("serve exited: %v\n%s", err, s.stderr)
		default:
		}
		_, err := os.Stat(filepath.Join(state, "control.sock"))
		return err
	})
	return s
}

func (s *metricsServe) stop(t testing.TB) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("serve did not stop on SIGTERM:\n%s", s.stderr)
	}
}

// scrape is the series of one scrape, by "name{k=v,...}" (labels sorted),
// a histogram by its count.
func scrape(t testing.TB, url string) map[string]float64 { return promtest.Scrape(t, url, "") }

// TestServeMetrics: a real service's /metrics says what the journal says:
// a drift repaired by a check forwarded to the service is one corrective
// change more, a changed declaration applied through it one intended
// change more.
func TestServeMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service as a process; skipped with -short")
	}
	bin := binary(t)
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	global := []string{"--root", root, "--state-dir", state}
	mesh := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(bin, append(global, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("mesh-host %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	declare := func(name, b string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		decl := "mesh: m\nnode: n1\nresources:\n  - file: {path: /etc/a.conf, content: \"a\\n\"}\n  - file: {path: /etc/b.conf, content: \"" + b + "\\n\"}\n"
		if err := os.WriteFile(p, []byte(decl), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mesh("apply", declare("one.yaml", "b1"))

	s := startMetricsServe(t, bin, global, state, freeAddr(t))
	const (
		intended   = "mesh_host_changes_total{cause=intended,kind=file}"
		corrective = "mesh_host_changes_total{cause=corrective,kind=file}"
		drift      = "mesh_host_drift_found_total{kind=file}"
	)
	var before map[string]float64
	basetest.Eventually(t, 60*time.Second, func() error {
		before = scrape(t, s.url)
		if before["mesh_host_reconciles_total{result=converged,trigger=start}"] != 1 {
			return errors.New("the start reconcile is not counted yet")
		}
		return nil
	})
	for k, v := range map[string]float64{
		"mesh_host_resources{state=owned}":              2,
		"mesh_host_declaration_revision{which=desired}": 1,
		"mesh_host_link_up{}":                           0,
		intended:                                        0,
		corrective:                                      0,
	} {
		if before[k] != v {
			t.Errorf("after start: got %s %v, want %v", k, before[k], v)
		}
	}

	if err := os.WriteFile(filepath.Join(root, "etc/a.conf"), []byte("by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mesh("check")
	after := scrape(t, s.url)
	for k, d := range map[string]float64{corrective: 1, intended: 0, drift: 1, "mesh_host_reconciles_total{result=converged,trigger=manual}": 1} {
		if got := after[k] - before[k]; got != d {
			t.Errorf("check repairing a drift: %s went up by %v, want %v", k, got, d)
		}
	}

	before = after
	mesh("apply", declare("two.yaml", "b2"))
	after = scrape(t, s.url)
	for k, d := range map[string]float64{corrective: 0, intended: 1, drift: 0} {
		if got := after[k] - before[k]; got != d {
			t.Errorf("apply of a changed declaration: %s went up by %v, want %v", k, got, d)
		}
	}
	if got := after["mesh_host_declaration_revision{which=last_good}"]; got != 2 {
		t.Errorf("last good revision %v, want 2", got)
	}
}

// TestServeMetricsAddressInUse: an address in use refuses the start, exit
// 2, naming the flag; nothing is started, not even the journal.
func TestServeMetricsAddressInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the service as a process; skipped with -short")
	}
	bin := binary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	cmd := exec.Command(bin, "--root", filepath.Join(dir, "root"), "--state-dir", state, "serve", "--metrics-listen", ln.Addr().String())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("serve with its metrics address in use: %v, want exit 2\n%s", err, out)
	}
	if !strings.Contains(string(out), "--metrics-listen "+ln.Addr().String()) {
		t.Errorf("the refusal does not name the flag and its address:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(state, "journal.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a journal was made by a refused start (%v)", err)
	}
}

// memStatus is a process's resident memory from /proc/PID/status, in
// KiB: VmRSS, VmHWM (its peak), and of VmRSS the anonymous part (heap,
// stacks) and the part mapped from files (the binary's pages).
type memStatus struct{ rss, hwm, anon, file float64 }

func procStatus(tb testing.TB, pid int) memStatus {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	var m memStatus
	for _, line := range strings.Split(string(b), "\n") {
		for name, v := range map[string]*float64{"VmRSS": &m.rss, "VmHWM": &m.hwm, "RssAnon": &m.anon, "RssFile": &m.file} {
			if _, err := fmt.Sscanf(line, name+": %g kB", v); err == nil {
				break
			}
		}
	}
	if m.rss == 0 || m.hwm == 0 {
		tb.Fatalf("no VmRSS or VmHWM in /proc/%d/status", pid)
	}
	return m
}

// metricsRSS runs a real serve on a fresh sandbox, with metrics on addr
// (off when empty): a declaration of files applied through it, then
// checks that each repair a drift, a scrape after every reconcile when
// metrics are on. It returns the service's memory after.
func metricsRSS(b *testing.B, bin string, files, checks int, on bool) memStatus {
	b.Helper()
	root, state := sandbox(b)
	decl := filepath.Join(b.TempDir(), "decl.yaml")
	writeFilesDeclaration(b, decl, files)
	global := []string{"--root", root, "--state-dir", state}
	addr := ""
	if on {
		addr = freeAddr(b)
	}
	s := startMetricsServe(b, bin, global, state, addr)
	mesh := func(args ...string) {
		b.Helper()
		if out, err := exec.Command(bin, append(global, args...)...).CombinedOutput(); err != nil {
			b.Fatalf("mesh-host %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	scraped := func() {
		if on {
			scrape(b, s.url)
		}
	}
	scraped()
	mesh("apply", decl)
	scraped()
	for i := range checks {
		if err := os.WriteFile(filepath.Join(root, fmt.Sprintf("etc/app/f%05d.conf", i)), []byte("by hand\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		mesh("check")
		scraped()
	}
	m := procStatus(b, s.cmd.Process.Pid)
	s.stop(b)
	return m
}

// BenchmarkServeMetricsRSS: the resident memory of a real `mesh-host
// serve` with --metrics-listen against without, after it applied a
// declaration of 3,000 files and repaired drift in 5 checks, scraped after
// every reconcile. Target: at most 1 MiB more. Figures in KiB.
func BenchmarkServeMetricsRSS(b *testing.B) {
	bin := binary(b)
	const files, checks = 3000, 5
	var off, on memStatus
	n := 0
	for b.Loop() {
		m := metricsRSS(b, bin, files, checks, false)
		off = memStatus{off.rss + m.rss, off.hwm + m.hwm, off.anon + m.anon, off.file + m.file}
		m = metricsRSS(b, bin, files, checks, true)
		on = memStatus{on.rss + m.rss, on.hwm + m.hwm, on.anon + m.anon, on.file + m.file}
		n++
	}
	f := float64(n)
	b.ReportMetric(off.rss/f, "off-rss-KiB")
	b.ReportMetric(on.rss/f, "on-rss-KiB")
	b.ReportMetric((on.rss-off.rss)/f, "more-rss-KiB")
	b.ReportMetric(off.hwm/f, "off-hwm-KiB")
	b.ReportMetric(on.hwm/f, "on-hwm-KiB")
	b.ReportMetric((on.hwm-off.hwm)/f, "more-hwm-KiB")
	b.ReportMetric((on.anon-off.anon)/f, "more-anon-KiB")
	b.ReportMetric((on.file-off.file)/f, "more-file-KiB")
}
