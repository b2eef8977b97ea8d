// Package meshtest starts a mesh for the control plane's tests: a real
// embedded broker, the control user's connection to it, and the streams
// and buckets the node service makes, with no control service running.
// What a test's nodes say it publishes itself, with their credentials or
// the control user's.
package meshtest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker/brokertest"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
)

// Mesh is a started mesh; everything is closed when the test ends.
type Mesh struct {
	A    *authority.Authority
	URL  string // the broker's
	Conn *nats.Conn
	JS   jetstream.JetStream
	Log  *slog.Logger
}

// Start starts mesh on a broker of its own.
func Start(t testing.TB, mesh string) *Mesh {
	t.Helper()
	a, b, log := brokertest.Start(t, mesh)
	nc, err := client.Dial(a, []string{b.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&nodeservice.Service{Conn: nc, Mesh: mesh, Key: a.DeclarationKey(), Log: log}).Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &Mesh{A: a, URL: b.URL(), Conn: nc, JS: js, Log: log}
}
