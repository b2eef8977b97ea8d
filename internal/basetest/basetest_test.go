package basetest

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// recorder is a testing.TB that notes a failure or a skip instead of
// ending the test, so that the helpers' own failures can be tested.
type recorder struct {
	testing.TB
	failed, skipped string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatal(args ...any) {
	r.failed = "fatal"
	panic(r)
}
func (r *recorder) Fatalf(format string, args ...any) { r.Fatal() }
func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = format
	panic(r)
}

// run calls fn with r, and recovers the panic r's Fatal or Skip makes.
func (r *recorder) run(fn func(testing.TB)) {
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
	}()
	fn(r)
}

func TestEventually(t *testing.T) {
	calls := 0
	Eventually(t, time.Second, func() error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 {
		t.Errorf("check ran %d times, want 3", calls)
	}
	r := &recorder{TB: t}
	start := time.Now()
	r.run(func(tb testing.TB) { Eventually(tb, 50*time.Millisecond, func() error { return errors.New("never") }) })
	if r.failed == "" {
		t.Error("Eventually of a check that never holds did not fail")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Errorf("failed after %v, before its timeout", took)
	}
}

func TestNeedTools(t *testing.T) {
	r := &recorder{TB: t}
	r.run(func(tb testing.TB) { NeedTools(tb, "nothing", "no-such-tool-anywhere") })
	if r.skipped == "" {
		t.Error("a missing tool did not skip")
	}
	r = &recorder{TB: t}
	r.run(func(tb testing.TB) { NeedTools(tb, "coreutils", "true") })
	if r.skipped != "" || r.failed != "" {
		t.Errorf("a present tool skipped or failed: %q %q", r.skipped, r.failed)
	}
}

func TestNATS(t *testing.T) {
	s := NATS(t, &server.Options{})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatalf("connect to the embedded server: %v", err)
	}
	nc.Close()
}
