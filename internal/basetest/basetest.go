// Package basetest holds the helpers the module's tests share: polling with
// a deadline, skipping for a missing tool, an embedded NATS server on a
// random port with a readiness wait, and archives written for a test.
//
// It is a leaf: it imports nothing of the module, so that any package's
// tests may use it without an import cycle. What a test needs of the
// module's own types (a root, a bed) lives with those types
// (drivers/driverstest, testbeds).
package basetest

import (
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// pollEvery is how often Eventually checks: short beside any wait a test
// makes, long enough not to busy a core.
const pollEvery = 10 * time.Millisecond

// Eventually calls check until it returns nil, and fails t with check's
// last error once timeout has passed.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(pollEvery)
	}
}

// Until is Eventually for a condition: it fails t with "timed out waiting
// for what" once timeout has passed.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, func() error {
		if cond() {
			return nil
		}
		return fmt.Errorf("timed out waiting for %s", what)
	})
}

// NeedTools skips t, saying so, unless every tool is on PATH; the message
// names debianPackage, which installs it.
func NeedTools(t testing.TB, debianPackage string, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian package %s): %v", tool, debianPackage, err)
		}
	}
}

// readyWithin bounds a server's start: far beyond what it takes on a
// loaded machine.
const readyWithin = 20 * time.Second

// NATS starts an embedded nats-server with opts, waits until it takes
// connections, and shuts it down when t ends. A zero Host is 127.0.0.1
// and a zero Port any free one; the server neither logs nor handles
// signals.
func NATS(t testing.TB, opts *server.Options) *server.Server {
	t.Helper()
	o := *opts
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	o.NoLog, o.NoSigs = true, true
	s, err := server.NewServer(&o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(readyWithin) {
		s.Shutdown()
		t.Fatalf("the NATS server on %s:%d did not start within %v", o.Host, o.Port, readyWithin)
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}
