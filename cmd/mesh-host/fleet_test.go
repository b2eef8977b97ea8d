package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/tuning"
)

// fleetMain is mesh-host-fleet, the many-hosts runner of the beds (see
// testbeds.StartFleet): this package's test binary run under that name
// (testscript.Main dispatches on it) runs one `mesh-host serve` a node of
// its token file, in one process. Each is the command line itself,
// runCLI(--root R --state-dir S serve), so it goes through the grammar and
// the same wiring as the shipped program, with a root, a state directory
// (its own journal), a key and credentials (redeemed from its own token by
// `mesh-host enrol`) and a connection of its own. Nothing is shared but
// the process: the beds put many hosts in one because 10,000 processes do
// not fit a small machine.
//
// The token file is what `meshctl enrol --batch` prints: NODE TOKEN a
// line. It prints "enrolled N" and then "started N" on standard output,
// and serves until SIGINT or SIGTERM. It starts a few hosts at a time
// (-starting), each until its link is up. The hosts' logs go, each line
// prefixed with its node, to DIR/fleet.log.
func fleetMain(args []string, stdout, stderr io.Writer) int {
	heapReturner = tuning.NewHeapReturner() // one for all its hosts
	fs := flag.NewFlagSet("mesh-host-fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "directory of the hosts: DIR/NODE/{root,state}, and fleet.log")
	tokens := fs.String("tokens", "", "file of NODE TOKEN lines (meshctl enrol --batch)")
	enrolParallel := fs.Int("enrol-parallel", 16, "enrolments at once")
	starting := fs.Int("starting", 32, "hosts started and not yet linked at once")
	nofile := fs.Uint64("nofile", 0, "raise RLIMIT_NOFILE to this, or to the hard limit if it may not go above (0: leave it)")
	var serveArgs multiFlag
	fs.Var(&serveArgs, "serve-arg", "a flag for every host's serve (repeatable)")
	if err := fs.Parse(args); err != nil {
		return command.ExitRefused
	}
	if *dir == "" || *tokens == "" {
		fmt.Fprintln(stderr, "mesh-host-fleet: -dir and -tokens are required")
		return command.ExitRefused
	}
	if *nofile > 0 {
		if err := raiseNoFile(*nofile, stdout); err != nil {
			fmt.Fprintf(stderr, "mesh-host-fleet: %v\n", err)
			return command.ExitFailed
		}
	}
	nodes, err := readTokens(*tokens)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host-fleet: %v\n", err)
		return command.ExitRefused
	}
	logf, err := os.OpenFile(filepath.Join(*dir, "fleet.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host-fleet: %v\n", err)
		return command.ExitFailed
	}
	defer logf.Close()
	logs := &lockedWriter{w: logf}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	global := func(n fleetNode) []string {
		return []string{"--root", filepath.Join(*dir, n.name, "root"), "--state-dir", filepath.Join(*dir, n.name, "state")}
	}
	// Enrolled as `mesh-host enrol` is, unless a previous run did.
	var failures atomic.Int64
	next := make(chan fleetNode)
	var wg sync.WaitGroup
	for range *enrolParallel {
		wg.Go(func() {
			for n := range next {
				if err := os.MkdirAll(filepath.Join(*dir, n.name, "root", "etc"), 0o755); err != nil {
					fmt.Fprintf(stderr, "mesh-host-fleet: %v\n", err)
					failures.Add(1)
					continue
				}
				if _, err := os.Stat(filepath.Join(*dir, n.name, "state", "link.json")); err == nil {
					continue
				}
				w := logs.prefixed(n.name)
				if code := runCLI(ctx, append(global(n), "enrol", n.token), w, w, nil); code != command.ExitOK {
					fmt.Fprintf(stderr, "mesh-host-fleet: mesh-host enrol %s: exit %d (see fleet.log)\n", n.name, code)
					failures.Add(1)
				}
			}
		})
	}
	for _, n := range nodes {
		next <- n
	}
	close(next)
	wg.Wait()
	if failures.Load() > 0 {
		return command.ExitFailed
	}
	fmt.Fprintf(stdout, "enrolled %d\n", len(nodes))

	// A few at a time, each until its link is up: thousands of TLS
	// handshakes at once on a small machine time out and start again,
	// and the fleet comes up slower than one by one.
	var served sync.WaitGroup
	var exited atomic.Int64
	slots := make(chan struct{}, *starting)
	start := time.Now()
	for _, n := range nodes {
		select {
		case <-ctx.Done():
		case slots <- struct{}{}:
		}
		if ctx.Err() != nil {
			break
		}
		served.Go(func() {
			var once sync.Once
			up := func() { once.Do(func() { <-slots }) }
			defer up()
			w := logs.prefixed(n.name)
			w.linkUp = up
			args := append(append(global(n), "serve"), serveArgs...)
			if code := runCLI(ctx, args, w, w, nil); code != command.ExitOK || ctx.Err() == nil {
				fmt.Fprintf(stderr, "mesh-host-fleet: mesh-host serve %s: exit %d (see fleet.log)\n", n.name, code)
				exited.Add(1)
			}
		})
	}
	for range *starting {
		select {
		case <-ctx.Done():
		case slots <- struct{}{}:
		}
	}
	fmt.Fprintf(stdout, "started %d in %s (goroutines %d)\n", len(nodes), time.Since(start).Round(time.Millisecond), runtime.NumGoroutine())
	served.Wait()
	if exited.Load() > 0 {
		return command.ExitFailed
	}
	return command.ExitOK
}

// raiseNoFile raises RLIMIT_NOFILE to want, or, without the privilege
// to raise the hard limit (CAP_SYS_RESOURCE), to the hard limit, saying so.
func raiseNoFile(want uint64, stdout io.Writer) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= want {
		return nil
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(want, lim.Max)}); err == nil {
		return nil
	}
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise RLIMIT_NOFILE to %d: %w", lim.Cur, err)
	}
	if lim.Cur < want {
		fmt.Fprintf(stdout, "RLIMIT_NOFILE %d, the hard limit, not %d\n", lim.Cur, want)
	}
	return nil
}

type fleetNode struct{ name, token string }

func readTokens(path string) ([]fleetNode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []fleetNode
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		name, token, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want NODE TOKEN", path, n)
		}
		out = append(out, fleetNode{name: name, token: token})
	}
	return out, sc.Err()
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// lockedWriter is one log file many hosts write to, a whole line each.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) prefixed(node string) *prefixWriter {
	return &prefixWriter{l: l, prefix: []byte(node + ": ")}
}

// prefixWriter writes each line a host logs after its node's name. slog
// writes a record in one Write; other writers may split a line, which
// then reads split in the log, never interleaved within a Write.
type prefixWriter struct {
	l      *lockedWriter
	prefix []byte
	// linkUp, if set, is called when the host logs its link up: the log
	// is all the runner sees of a host, as an operator would.
	linkUp func()
}

var linkUpMsg = []byte(`msg="link up"`)

func (p *prefixWriter) Write(b []byte) (int, error) {
	if p.linkUp != nil && bytes.Contains(b, linkUpMsg) {
		p.linkUp()
	}
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	if _, err := p.l.w.Write(append(append([]byte(nil), p.prefix...), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
