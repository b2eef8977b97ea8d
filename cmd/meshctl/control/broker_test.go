package control

import (
	"crypto/tls"
	"fmt"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// The service's connection to the broker embedded in its process goes
// through a pipe, not loopback TLS; it is still the control user's, and
// the pipe is no way around the broker's authentication.
func TestServiceConnectsInProcessAndStillAuthenticates(t *testing.T) {
	t.Parallel() // the refusal takes the broker's write deadline (10 s): over a pipe, both ends write at once
	a, b, log := startBroker(t)
	nc, err := DialService(a, []string{b.URL()}, log, b)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A control user's right: the JetStream API of the mesh's account.
	s := &Service{Conn: nc, Mesh: testMesh, Key: a.DeclarationKey(), Log: log}
	if err := s.Ensure(t.Context()); err != nil {
		t.Fatalf("the in-process connection cannot do what the control user may: %v", err)
	}
	connz, err := b.srv.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range connz.Conns {
		if c.Name != "meshctl serve" {
			continue
		}
		found = true
		if c.IP != "" || c.TLSVersion != "" {
			t.Errorf("the service's connection is from %s:%d over TLS %q: want the in-process pipe", c.IP, c.Port, c.TLSVersion)
		}
	}
	if !found {
		t.Fatalf("no connection named meshctl serve among %d", len(connz.Conns))
	}

	// In process with a user of an account the mesh did not sign:
	// refused, as over the network.
	account, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	token, err := jwt.NewUserClaims(pub).Encode(account)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	foreign, err := nats.Connect("nats://in-process", nats.InProcessServer(b.srv), nats.UserJWTAndSeed(token, string(seed)), nats.Timeout(5*time.Second))
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		foreign.Close()
		t.Fatalf("an in-process connection of a foreign account's user was let in")
	}
	// Refused for who it is, not for the pipe.
	waitFor(t, 5*time.Second, func() error {
		closed, err := b.srv.Connz(&server.ConnzOptions{State: server.ConnClosed})
		if err != nil {
			return err
		}
		for _, c := range closed.Conns {
			if c.Reason == server.AuthenticationViolation.String() {
				return nil
			}
		}
		return fmt.Errorf("no closed connection refused for its credentials among %d", len(closed.Conns))
	})
}

// The broker forgets closed connections but for a few: it keeps them for a
// monitoring that nothing serves, and a fleet's enrolments would fill it.
func TestBrokerKeepsFewClosedConnections(t *testing.T) {
	a, b, _ := startBroker(t)
	for range 40 {
		nc, err := Dial(a, []string{b.URL()})
		if err != nil {
			t.Fatal(err)
		}
		nc.Close()
	}
	waitFor(t, 5*time.Second, func() error {
		connz, err := b.srv.Connz(&server.ConnzOptions{State: server.ConnClosed})
		switch {
		case err != nil:
			return err
		case connz.Total < 16:
			return fmt.Errorf("%d closed connections listed so far", connz.Total)
		}
		return nil
	})
	connz, err := b.srv.Connz(&server.ConnzOptions{State: server.ConnClosed})
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
	b, err := NewBroker(a, BrokerConfig{Listen: "127.0.0.1:0", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return a, b, log
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
		got := ServerNames(tc.host, tc.extra)
		for _, w := range append(tc.want, host) {
			if !slices.Contains(got, w) {
				t.Errorf("ServerNames(%q, %q) = %q, want %q in it", tc.host, tc.extra, got, w)
			}
		}
		if slices.Contains(got, "0.0.0.0") {
			t.Errorf("ServerNames(%q) = %q: the unspecified address is no name", tc.host, got)
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
