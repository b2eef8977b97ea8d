package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// newTestLinkHost is the service's link host over a new journal, admitting
// as serve does (env.admissible): what the journal tests push through. The
// link host's own tests are in package service.
func newTestLinkHost(t *testing.T) (*service.LinkHost, *journal.Journal) {
	t.Helper()
	j, err := hostjournal.Open(t.TempDir() + "/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	e := &env{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, now: time.Now,
		cli: &cli{OwnUnit: "mesh-host.service", Root: t.TempDir(), Parallel: 2}}
	return service.NewLinkHost(&service.Held{Journal: j}, e.admissible, nil), j
}

func lastRecord(t *testing.T, j *journal.Journal) event.Record {
	t.Helper()
	in, err := j.Info()
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := j.Get(in.Head)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
