package testbeds

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// BuildNATSServer compiles nats-server, the version go.mod requires, into
// dir and returns its path: the broker a fleet runs on instead of the
// embedded one.
func BuildNATSServer(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "nats-server")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "github.com/nats-io/nats-server/v2")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build nats-server: %v\n%s", err, b)
	}
	return out, nil
}

// NATSServer is one server of a bed's cluster.
type NATSServer struct {
	Name   string
	Listen string // clients' HOST:PORT
	proc   process
}

// PID is the server's process id.
func (s *NATSServer) PID() int { return s.proc.pid() }

// NewOnCluster is New on a cluster of n nats-server processes on this
// machine instead of the embedded broker: `meshctl init`, then each server
// configured as an operator would, with what `meshctl nats-config` prints
// (its own certificate from the mesh's CA), JetStream and a cluster block
// routing to the others; then `meshctl serve --nats` on all of them. The
// routes between the servers are plaintext on loopback.
func NewOnCluster(tb TB, bins Binaries, natsServer string, n int) *Bed {
	tb.Helper()
	b := &Bed{tb: tb, bins: bins, Dir: tb.TempDir()}
	b.Control = &Control{bed: b, DataDir: filepath.Join(b.Dir, "control")}
	tb.Cleanup(b.cleanup)
	b.MustMeshctl("init")
	routes := make([]string, n)
	b.Cluster = make([]*NATSServer, n)
	for i := range n {
		b.Cluster[i] = &NATSServer{Name: fmt.Sprintf("nats-%d", i), Listen: freeAddr(tb)}
		routes[i] = "nats-route://" + freeAddr(tb)
	}
	var urls []string
	for i, s := range b.Cluster {
		dir := filepath.Join(b.Dir, s.Name)
		snippet := b.MustMeshctl("nats-config", "--jwt-dir", filepath.Join(dir, "jwt"), "--tls-dir", filepath.Join(dir, "tls"),
			"--server-name", "127.0.0.1", "--server-name", "localhost")
		var others []string
		for j, r := range routes {
			if j != i {
				others = append(others, fmt.Sprintf("%q", r))
			}
		}
		conf := snippet + fmt.Sprintf(`
server_name: %q
listen: %q
jetstream {
  store_dir: %q
}
cluster {
  name: "mesh"
  listen: %q
  routes: [%s]
}
`, s.Name, s.Listen, filepath.Join(dir, "jetstream"), strings.TrimPrefix(routes[i], "nats-route://"), strings.Join(others, ", "))
		path := filepath.Join(dir, "nats.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			tb.Fatalf("%v", err)
		}
		s.proc.start(tb, s.Name, natsServer, filepath.Join(b.Dir, s.Name+".log"), []string{"-c", path})
		urls = append(urls, "tls://"+s.Listen)
	}
	for _, s := range b.Cluster {
		Eventually(tb, 30*time.Second, s.Name+" listens", func() error {
			if !s.proc.running() {
				return Fatal(fmt.Errorf("%s exited: %s", s.Name, s.proc.exit()))
			}
			c, err := net.DialTimeout("tcp", s.Listen, time.Second)
			if err != nil {
				return err
			}
			return c.Close()
		})
	}
	b.Control.Listen = b.Cluster[0].Listen
	b.Control.NATS = urls
	// JetStream's meta leader is elected after the routes are up: serve
	// retries its streams until then, and Start waits for it.
	b.Control.Start()
	return b
}
