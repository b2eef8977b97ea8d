package nodeservice

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/broker/brokertest"
)

const testMesh = "home"

// bed is one mesh on a real embedded broker on a random port, its streams
// and buckets in place: a control-user connection and JetStream. The
// tests of the service and the operator's client together are package
// client's, which has the fuller bed.
type bed struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
}

func newBed(t testing.TB) *bed {
	t.Helper()
	a, b, log := brokertest.Start(t, testMesh)
	tc, err := a.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.URL(), nats.UserCredentials(a.ControlCreds()), nats.Secure(tc), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{Conn: nc, Mesh: testMesh, Key: a.DeclarationKey(), Log: log}
	if err := s.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &bed{nc: nc, js: js, log: log}
}
