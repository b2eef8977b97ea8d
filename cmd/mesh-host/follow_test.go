package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
)

// syncBuffer is a bytes.Buffer safe to write from the command and read from
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a mesh-host command line in the background; the returned stop
// ends it and returns its exit code.
func start(t *testing.T, args []string, stdout, stderr io.Writer) (stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	code := make(chan int, 1)
	go func() { code <- runCLI(ctx, args, stdout, stderr, nil) }()
	var once sync.Once
	var c int
	stop = func() int {
		once.Do(func() { cancel(); c = <-code })
		return c
	}
	t.Cleanup(func() { stop() })
	return stop
}

func appendRecord(t *testing.T, path string, r event.Record) {
	t.Helper()
	j, err := hostjournal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if _, err := j.Append(r); err != nil {
		t.Fatal(err)
	}
}

// TestFollowOutlivesTheService: `journal --follow` streams from the service
// while it runs, reads the file when it stops (an apply may still append),
// and goes back to the service when one starts again, printing each record
// once.
func TestFollowOutlivesTheService(t *testing.T) {
	state := t.TempDir()
	path := filepath.Join(state, "journal.db")
	appendRecord(t, path, event.New(event.LinkDown, 0, "", event.LinkPayload{Reason: "before anything"}))

	var out, errs syncBuffer
	start(t, []string{"--state-dir", state, "journal", "--follow", "--kind", "link.down", "--kind", "host.started"}, &out, &errs)
	basetest.Until(t, 10*time.Second, "the existing record", func() bool { return strings.Contains(out.String(), "before anything") })

	var serveErr syncBuffer
	stopServe := start(t, []string{"--state-dir", state, "serve"}, io.Discard, &serveErr)
	basetest.Until(t, 10*time.Second, "the service's start, through its socket", func() bool { return strings.Count(out.String(), "host.started") == 1 })
	if code := stopServe(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, serveErr.String())
	}

	// No service: a record appended to the file (as `apply` would) shows.
	appendRecord(t, path, event.New(event.LinkDown, 0, "", event.LinkPayload{Reason: "while no service ran"}))
	basetest.Until(t, 10*time.Second, "the record appended to the file", func() bool { return strings.Contains(out.String(), "while no service ran") })

	start(t, []string{"--state-dir", state, "serve"}, io.Discard, io.Discard)
	basetest.Until(t, 10*time.Second, "the second service's start", func() bool { return strings.Count(out.String(), "host.started") == 2 })

	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 { // header, 2 link.down, 2 host.started
		t.Errorf("got %d lines, want a header and 4 records, each once:\n%s\nstderr:\n%s", len(lines), out.String(), errs.String())
	}
	if strings.Count(out.String(), "SEQ") != 1 {
		t.Errorf("the header was printed more than once:\n%s", out.String())
	}
}
