package broker

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

const testMesh = "home"

// The broker forgets closed connections but for a few: it keeps them for a
// monitoring that nothing serves, and a fleet's enrolments would fill it.
func TestBrokerKeepsFewClosedConnections(t *testing.T) {
	a, b, _ := startBroker(t)
	for range 40 {
		nc, err := dial(a, b.URL())
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		connz, err := b.Connz(&server.ConnzOptions{State: server.ConnClosed})
		switch {
		case err != nil:
			return err
		case connz.Total < 16:
			return fmt.Errorf("%d closed connections listed so far", connz.Total)
		}
		return nil
	})
	connz, err := b.Connz(&server.ConnzOptions{State: server.ConnClosed})
	if err != nil {
		t.Fatal(err)
	}
	if connz.Total > 16 {
		t.Errorf("%d closed connections kept, want at most 16", connz.Total)
	}
}

// startBroker starts a mesh's broker on a random port until the test ends.
func startBroker(t testing.TB) (*authority.Authority, *Broker, *slog.Logger) {
	t.Helper()
	a, _, err := authority.Init(filepath.Join(t.TempDir(), "data"), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := New(a, Config{Listen: "127.0.0.1:0", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return a, b, log
}

// dial connects as the control user, as meshctl does.
func dial(a *authority.Authority, url string) (*nats.Conn, error) {
	tc, err := a.ClientTLS()
	if err != nil {
		return nil, err
	}
	return nats.Connect(url, nats.UserCredentials(a.ControlCreds()), nats.Secure(tc), nats.Timeout(5*time.Second))
}

func TestServerNames(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct {
		host  string
		extra []string
		want  []string
	}{
		{"10.0.0.1", []string{"Broker.Lab."}, []string{"broker.lab", "10.0.0.1", "localhost", "127.0.0.1", "::1"}},
		{"0.0.0.0", nil, []string{"127.0.0.1", "localhost", "::1"}},
	} {
		got := serverNames(tc.host, tc.extra)
		for _, w := range append(tc.want, host) {
			if !slices.Contains(got, w) {
				t.Errorf("serverNames(%q, %q) = %q, want %q in it", tc.host, tc.extra, got, w)
			}
		}
		if slices.Contains(got, "0.0.0.0") {
			t.Errorf("serverNames(%q) = %q: the unspecified address is no name", tc.host, got)
		}
	}
}

// TestServerCertRenewed: the embedded broker's certificate is reissued
// before it ends, not after.
func TestServerCertRenewed(t *testing.T) {
	a, _, err := authority.Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	sc := &serverCert{now: func() time.Time { return now }, issue: func(now time.Time) (tls.Certificate, error) { return a.IssueServerCert([]string{"localhost"}, now) }}
	first, err := sc.get(nil)
	if err != nil {
		t.Fatal(err)
	}
	now = first.Leaf.NotAfter.Add(-serverRenew - time.Hour)
	if same, _ := sc.get(nil); same != first {
		t.Error("reissued early")
	}
	now = now.Add(2 * time.Hour)
	renewed, _ := sc.get(nil)
	if renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Errorf("not reissued within %v of its end", serverRenew)
	}
}
