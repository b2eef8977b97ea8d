package testbeds_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds"
)

// nodeState is node's state and reason as `meshctl nodes --json` gives it.
func nodeState(b *testbeds.Bed, node string) (client.NodeStatus, error) {
	r := b.Meshctl("nodes", "--json")
	if r.Code != 0 {
		return client.NodeStatus{}, errors.New(r.String())
	}
	nodes, err := testbeds.JSONLines[client.NodeStatus](r.Stdout)
	if err != nil {
		return client.NodeStatus{}, err
	}
	for _, n := range nodes {
		if n.Node == node {
			return n, nil
		}
	}
	return client.NodeStatus{}, fmt.Errorf("%s is not listed", node)
}

// waitState polls until node is in state, and returns it as listed.
func waitState(t *testing.T, b *testbeds.Bed, node, state string, timeout time.Duration) client.NodeStatus {
	t.Helper()
	var got client.NodeStatus
	testbeds.Eventually(t, timeout, node+" "+state, func() error {
		n, err := nodeState(b, node)
		if err != nil {
			return err
		}
		if n.State != state {
			return fmt.Errorf("%s is %s (%s), want %s", node, n.State, n.Reason, state)
		}
		got = n
		return nil
	})
	return got
}

// linkLine is the link line of a status output.
func linkLine(out string) string {
	for l := range strings.SplitSeq(out, "\n") {
		if strings.HasPrefix(l, "link ") {
			return strings.TrimSpace(strings.TrimPrefix(l, "link"))
		}
	}
	return ""
}

// A host stopped with SIGTERM says so before its link closes: the control
// plane shows it offline with the reason, meshctl status says when it was
// last heard rather than the link its report said was up, and its own
// status says the link went down as it stopped.
func TestGracefulStopIsOffline(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web1")
	h.Start()
	waitState(t, b, "web1", client.StateOK, 30*time.Second)

	if code := h.Stop(); code != 0 {
		t.Fatalf("mesh-host serve exited %d on SIGTERM", code)
	}
	stopped := time.Now()
	n := waitState(t, b, "web1", client.StateOffline, 30*time.Second)
	t.Logf("offline %v after the host exited: %s", time.Since(stopped).Round(time.Millisecond), n.Reason)
	if !strings.Contains(n.Reason, "the host is stopping") {
		t.Errorf("reason %q, want it to say the host is stopping", n.Reason)
	}

	st := b.MustMeshctl("status", "web1")
	if l := linkLine(st); !strings.HasPrefix(l, "last heard ") || !strings.Contains(l, "(offline: the host is stopping)") {
		t.Errorf("meshctl status link line %q, want last heard … (offline: the host is stopping)\n%s", l, st)
	}
	r := h.Run("status")
	if r.Code != 0 {
		t.Fatalf("mesh-host status: %s", r)
	}
	if l := linkLine(r.Stdout); !strings.HasPrefix(l, "down since ") || !strings.HasSuffix(l, ": the host is stopping") {
		t.Errorf("mesh-host status link line %q, want down since …: the host is stopping", l)
	}
}

// A host killed with SIGKILL journals nothing and says nothing: the
// broker sees its connection close, and the control plane shows it
// disconnected within seconds, long before its heartbeats would make it
// silent (3 minutes). Its own status does not claim the link it held.
func TestKilledHostIsDisconnected(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web1")
	h.Start()
	waitState(t, b, "web1", client.StateOK, 30*time.Second)

	h.Kill()
	killed := time.Now()
	n := waitState(t, b, "web1", client.StateDisconnected, 30*time.Second)
	t.Logf("disconnected %v after the kill: %s", time.Since(killed).Round(time.Millisecond), n.Reason)
	if n.Presence == nil || n.Presence.Connected || n.Presence.Reason == "" {
		t.Errorf("presence %+v, want a disconnect with the broker's reason", n.Presence)
	}

	if l := linkLine(b.MustMeshctl("status", "web1")); !strings.HasPrefix(l, "last heard ") || !strings.Contains(l, "(disconnected: its connection closed") {
		t.Errorf("meshctl status link line %q, want last heard … (disconnected: …)", l)
	}
	r := h.Run("status")
	if r.Code != 0 {
		t.Fatalf("mesh-host status: %s", r)
	}
	if l := linkLine(r.Stdout); !strings.HasPrefix(l, "not held: the service is not running (last journaled: up to ") {
		t.Errorf("mesh-host status link line %q, want not held: the service is not running (last journaled: up to …)", l)
	}

	// Back: its connection and heartbeat clear the state.
	h.Start()
	waitState(t, b, "web1", client.StateOK, 30*time.Second)
}

// A network cut where something between still answers TCP (here a proxy
// that stops forwarding and closes nothing): the host notices by its pings
// and journals link.down, and the broker closes the stale connection by
// its own, so the control plane shows the node disconnected. Both ping
// intervals are shortened to a second.
func TestCutNetworkIsNoticedBothWays(t *testing.T) {
	b := beds(t)
	b.Control.Stop()
	b.Control.Start("--ping-interval", "1s")
	h := b.AddHost("web1")
	p := startProxy(t, b.Control.Listen)
	pointAt(t, h, "tls://"+p.addr())
	h.Start("--ping-interval", "1s")
	waitState(t, b, "web1", client.StateOK, 30*time.Second)

	before := len(h.Records())
	p.cut()
	testbeds.Eventually(t, 30*time.Second, "web1 journals link.down", func() error {
		recs := h.Records()
		for _, r := range recs[min(before, len(recs)):] {
			if r.Kind == event.LinkDown {
				t.Logf("web1 journaled link.down: %s", r.Payload)
				return nil
			}
		}
		return errors.New("no link.down since the cut")
	})
	n := waitState(t, b, "web1", client.StateDisconnected, 30*time.Second)
	if n.Presence == nil || !strings.Contains(n.Presence.Reason, "Stale") {
		t.Errorf("presence %+v, want the broker's stale connection", n.Presence)
	}
}

// pointAt makes h's link.json name url as the broker's address.
func pointAt(t *testing.T, h *testbeds.Host, url string) {
	t.Helper()
	path := filepath.Join(h.StateDir, "link.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["urls"] = []string{url}
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// proxy forwards TCP connections to a broker until cut; then it forwards
// nothing more and closes nothing, as a path that died without a word.
type proxy struct {
	ln     net.Listener
	to     string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, to: to}
	t.Cleanup(p.close)
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) cut() { p.frozen.Store(true) }

func (p *proxy) keep(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.keep(c)
		if p.frozen.Load() {
			continue // held open, never answered
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.keep(up)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// pipe copies from src to dst until cut; after, what it reads is dropped.
func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !p.frozen.Load() {
				dst.Close() // a close forwarded, while it still forwards
			}
			return
		}
	}
}
