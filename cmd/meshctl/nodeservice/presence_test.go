package nodeservice

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker/brokertest"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// connectAs connects to url as a user of key whose JWT a signed for node.
func connectAs(t *testing.T, a *authority.Authority, url, node string, key nkeys.KeyPair) *nats.Conn {
	t.Helper()
	pub, _ := key.PublicKey()
	token, _, err := a.NodeJWT(node, pub, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tc, err := a.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, nats.Secure(tc), nats.UserJWT(
		func() (string, error) { return token, nil },
		func(nonce []byte) ([]byte, error) { return key.Sign(nonce) },
	), nats.Name("mesh-host home/"+node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// The broker's connect and disconnect events of a node's own key are
// recorded as its presence, by two services at once; a connection of
// another key signed with the node's name is not the node's.
func TestPresenceRecordsTheBrokersEvents(t *testing.T) {
	a, b, log := brokertest.Start(t, testMesh)
	tc, err := a.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.URL(), nats.UserCredentials(a.ControlCreds()), nats.Secure(tc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Ensure(context.Background(), js, testMesh, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for range 2 { // two control services serving one cluster
		sys, err := DialSystem(a, []string{b.URL()}, false, log)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sys.Close)
		p := &Presence{Sys: sys, Conn: nc, Mesh: testMesh, Account: a.AccountPublicKey(), Log: log}
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("presence: %v", err)
			}
		})
		// Subscribed once a connection's events reach it: flushed.
		if err := sys.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := nkeys.CreateUser()
	pub, _ := key.PublicKey()
	nodes, err := js.KeyValue(ctx, "MESH_NODES")
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutCredential(ctx, nodes, testMesh, store.NodeCredential{Node: "web1", Key: pub, Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	presences, err := store.New(js).Presences(ctx, testMesh)
	if err != nil {
		t.Fatal(err)
	}

	// Another key signed for the name (an old one, or an enrolment's
	// bearer of the same name) is not the node.
	other, _ := nkeys.CreateUser()
	connectAs(t, a, b.URL(), "web1", other).Close()

	node := connectAs(t, a, b.URL(), "web1", key)
	var connected *store.Presence
	basetest.Eventually(t, 10*time.Second, func() error {
		p, _, err := presences.Get(ctx, "web1")
		if err != nil || p == nil || !p.Connected {
			return fmt.Errorf("presence %+v, %v; want connected", p, err)
		}
		connected = p
		return nil
	})
	node.Close()
	basetest.Eventually(t, 10*time.Second, func() error {
		p, _, err := presences.Get(ctx, "web1")
		if err != nil || p == nil || p.Connected {
			return fmt.Errorf("presence %+v, %v; want disconnected", p, err)
		}
		if p.Reason != "Client Closed" || !p.At.After(connected.At) || p.Conn != connected.Conn {
			return fmt.Errorf("presence %+v, want the close of %+v", p, connected)
		}
		return nil
	})
	// The connect, then the disconnect: two services recorded each once.
	st, err := js.Stream(ctx, "KV_MESH_PRESENCE")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.LastSeq; got != 2 {
		t.Errorf("presence bucket written %d times, want 2 (a connect and a disconnect, each once)", got)
	}
}
