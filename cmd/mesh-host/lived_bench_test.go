package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/internal/basetest"
)

// livedFiles and livedRounds are issue 32's lived-in host: 10,000 files,
// and a journal that has lived through 50 applies and 50 checks.
const livedFiles, livedRounds = 10_000, 50

// writeLivedDeclaration is writeFilesDeclaration at revision rev, with one
// file's content changed from the last revision's: a declaration that
// changed a little, as most do.
func writeLivedDeclaration(b testing.TB, path string, n, rev int) {
	b.Helper()
	var sb strings.Builder
	fmt.Fprintf(&sb, "mesh: bench\nnode: n1\nrevision: %d\nresources:\n  - directory: {path: /etc/app}\n", rev)
	for i := range n {
		v := i * 7
		if i == rev%n {
			v = -rev
		}
		fmt.Fprintf(&sb, "  - file: {path: /etc/app/f%05d.conf, content: \"setting-%d = %d\\n\", mode: \"0644\"}\n", i, i, v)
	}
	if err := os.WriteFile(path, []byte(sb.String()), 0o600); err != nil {
		b.Fatal(err)
	}
}

// livedHost makes a host of files files whose journal lived through rounds
// applies of a new revision and rounds checks, each repairing drift in 5
// files; it returns the directory holding root/ and state/, and the next
// revision.
func livedHost(b *testing.B, bin string, files, rounds int) (dir string, next int) {
	b.Helper()
	dir = b.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		b.Fatal(err)
	}
	decl := filepath.Join(dir, "decl.yaml")
	for rev := 1; rev <= rounds; rev++ {
		writeLivedDeclaration(b, decl, files-1, rev)
		runBin(b, bin, root, state, "apply", decl)
		for i := range 5 {
			f := filepath.Join(root, fmt.Sprintf("etc/app/f%05d.conf", (rev*5+i)%(files-1)))
			if err := os.WriteFile(f, []byte("by hand\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		runBin(b, bin, root, state, "check")
	}
	return dir, rounds + 1
}

// runBin runs bin against root and state and returns its peak resident
// set in KiB (the child's rusage).
func runBin(b testing.TB, bin, root, state string, args ...string) int64 {
	b.Helper()
	cmd := exec.Command(bin, append([]string{"--root", root, "--state-dir", state, "--socket", filepath.Join(state, "none.sock")}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("mesh-host %s: %v\n%s", strings.Join(args, " "), err, lastLines(out))
	}
	return cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
}

// copyHost copies a lived host's root and state to a fresh directory.
func copyHost(b *testing.B, from string) (root, state string) {
	b.Helper()
	to := b.TempDir()
	if out, err := exec.Command("cp", "-a", filepath.Join(from, "root"), filepath.Join(from, "state"), to).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v\n%s", err, out)
	}
	return filepath.Join(to, "root"), filepath.Join(to, "state")
}

// livedFigures is what BenchmarkLivedRSS measures of one binary, in KiB.
type livedFigures struct{ check, apply, serveIdle, serveHWM float64 }

// measureLived measures bin on a copy of the lived host at dir: a no-op
// `check`, an `apply` of the next revision (a file changed), then `serve`
// idle once it reconciled at start.
func measureLived(b *testing.B, bin, dir string, rev int) livedFigures {
	b.Helper()
	var f livedFigures
	root, state := copyHost(b, dir)
	f.check = float64(runBin(b, bin, root, state, "check"))
	decl := filepath.Join(b.TempDir(), "next.yaml")
	writeLivedDeclaration(b, decl, livedFiles-1, rev)
	f.apply = float64(runBin(b, bin, root, state, "apply", decl))

	// A drifted file, so that the start's reconcile of all 10,000 changes
	// one and says so in the log.
	if err := os.WriteFile(filepath.Join(root, "etc/app/f00000.conf"), []byte("by hand\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var stderr lockedBuffer
	cmd := exec.Command(bin, "--root", root, "--state-dir", state, "serve", "--drift-interval", "1h")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
		}
	}()
	basetest.Eventually(b, 120*time.Second, func() error {
		select {
		case err := <-exited:
			exited <- err
			b.Fatalf("serve exited: %v\n%s", err, stderr.String())
		default:
		}
		if !strings.Contains(stderr.String(), "msg=reconciled") {
			return fmt.Errorf("not reconciled yet")
		}
		return nil
	})
	// Idle: what it holds between reconciles, once the start's garbage
	// is collected and given back (the runtime's scavenger paces that
	// over seconds).
	time.Sleep(10 * time.Second)
	m := procStatus(b, cmd.Process.Pid)
	f.serveIdle, f.serveHWM = m.rss, m.hwm
	return f
}

// BenchmarkLivedRSS: issue 32's memory targets, whole processes, on a
// host of 10,000 files whose journal lived through 50 applies and 50
// checks: peak RSS of a no-op `check` and of an `apply` of a changed
// declaration (target ≤ 37 MiB each), and `serve` idle after it
// reconciled at start (≤ 16 MiB). MESH_HOST_BEFORE names another build
// of mesh-host (one from before a change) to measure side by side, in the
// same run, interleaved, on copies of the same host. Figures in MiB.
func BenchmarkLivedRSS(b *testing.B) {
	bins := []struct{ name, path string }{{"after", binary(b)}}
	if before := os.Getenv("MESH_HOST_BEFORE"); before != "" {
		bins = append([]struct{ name, path string }{{"before", before}}, bins...)
	}
	dir, rev := livedHost(b, bins[len(bins)-1].path, livedFiles, livedRounds)
	sums := make([]livedFigures, len(bins))
	n := 0
	for b.Loop() {
		for i, bin := range bins {
			f := measureLived(b, bin.path, dir, rev)
			sums[i] = livedFigures{sums[i].check + f.check, sums[i].apply + f.apply, sums[i].serveIdle + f.serveIdle, sums[i].serveHWM + f.serveHWM}
		}
		n++
	}
	for i, bin := range bins {
		mib := func(kib float64) float64 { return kib / 1024 / float64(n) }
		b.ReportMetric(mib(sums[i].check), bin.name+"-check-MiB")
		b.ReportMetric(mib(sums[i].apply), bin.name+"-apply-MiB")
		b.ReportMetric(mib(sums[i].serveIdle), bin.name+"-serve-idle-MiB")
		b.ReportMetric(mib(sums[i].serveHWM), bin.name+"-serve-peak-MiB")
	}
}
