package nodeservice

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker"
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
	a, _, err := authority.Init(filepath.Join(t.TempDir(), "data"), testMesh)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	b, err := broker.New(a, broker.Config{Listen: "127.0.0.1:0", Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
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
