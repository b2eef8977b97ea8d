// Package brokertest starts a mesh's embedded broker for tests: a fresh
// authority and its broker on a random port, stopped when the test ends.
// It is for tests only.
package brokertest

import (
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker"
)

// Start creates the authority of mesh in a temporary directory and starts
// its broker on a random port, logging at debug level to the test's
// output, until t ends. It returns the logger too, for the services the
// test runs beside it.
func Start(t testing.TB, mesh string) (*authority.Authority, *broker.Broker, *slog.Logger) {
	t.Helper()
	a, _, err := authority.Init(filepath.Join(t.TempDir(), "data"), mesh)
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
	return a, b, log
}
