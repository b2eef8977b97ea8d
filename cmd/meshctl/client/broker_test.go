package client

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/broker/brokertest"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// The service's connection to the broker embedded in its process goes
// through a pipe, not loopback TLS; it is still the control user's, and
// the pipe is no way around the broker's authentication.
func TestServiceConnectsInProcessAndStillAuthenticates(t *testing.T) {
	t.Parallel() // the refusal takes the broker's write deadline (10 s): over a pipe, both ends write at once
	a, b, log := brokertest.Start(t, testMesh)
	nc, err := nodeservice.Dial(a, []string{b.URL()}, log, b)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A control user's right: the JetStream API of the mesh's account.
	s := &nodeservice.Service{Conn: nc, Mesh: testMesh, Key: a.DeclarationKey(), Log: log}
	if err := s.Ensure(t.Context()); err != nil {
		t.Fatalf("the in-process connection cannot do what the control user may: %v", err)
	}
	connz, err := b.Connz(&server.ConnzOptions{})
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
	foreign, err := nats.Connect("nats://in-process", nats.InProcessServer(b), nats.UserJWTAndSeed(token, string(seed)), nats.Timeout(5*time.Second))
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil {
		foreign.Close()
		t.Fatalf("an in-process connection of a foreign account's user was let in")
	}
	// Refused for who it is, not for the pipe.
	basetest.Eventually(t, 5*time.Second, func() error {
		closed, err := b.Connz(&server.ConnzOptions{State: server.ConnClosed})
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
