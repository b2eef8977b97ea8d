package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/localsock"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// serveCmd is the host service. Today it holds the journal, records its own
// start, answers the CLI over its socket and compacts the journal daily; the
// link and the reconciler join its run group as they are built.
type serveCmd struct {
	DriftInterval time.Duration `name:"drift-interval" default:"10m" help:"How often to look for drift: change the mesh did not make."`
	CompactEvery  time.Duration `name:"compact-every" default:"24h" help:"How often to drop records older than the retention window."`
	Retention     time.Duration `name:"retention" default:"2160h" help:"Keep records at least this long (default 90 days)."`
	KeepLast      uint64        `name:"keep-last" default:"100000" help:"Keep at least this many newest records."`
}

func (c *serveCmd) Run(e *env) error {
	if e.held != nil {
		return refused("serve cannot be asked of a running service")
	}
	log := slog.New(slog.NewTextHandler(e.stderr, nil))
	j, err := openJournal(e.cli.journalPath())
	if err != nil {
		return failed("%v", err)
	}
	defer j.Close()
	if err := j.Check(); err != nil {
		return failed("%v", err)
	}
	started, err := j.Append(event.New(event.HostStarted, 0, "", event.HostStartedPayload{Version: version, PID: os.Getpid()}))
	if err != nil {
		return failed("record start: %v", err)
	}
	sock, err := localsock.Listen(e.cli.socketPath())
	if err != nil {
		return failed("%v", err)
	}
	log.Info("mesh-host serving", "version", version, "journal", j.Path(), "socket", e.cli.socketPath(), "start_seq", started[0].Seq)

	held := &heldJournal{j: j}
	var g run.Group
	{ // The CLI's questions, answered from the journal this process holds.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return localsock.Serve(ctx, sock, func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
				return runCLI(ctx, args, stdout, stderr, held)
			})
		}, func(error) { cancel() })
	}
	{ // Reconcile at start (the machine may have changed while nothing ran,
		// or the last run stopped mid-apply), then on the drift timer.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return c.reconcileLoop(ctx, e, held, log)
		}, func(error) { cancel() })
	}
	{ // Retention: a quiet machine's journal must not grow without bound.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			return c.compactLoop(ctx, j, log)
		}, func(error) { cancel() })
	}
	{ // SIGINT and SIGTERM end e.ctx; then the group stops.
		ctx, cancel := context.WithCancel(e.ctx)
		g.Add(func() error {
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	if err := g.Run(); err != nil {
		return failed("%v", err)
	}
	log.Info("mesh-host stopped")
	return nil
}

func (c *serveCmd) compactLoop(ctx context.Context, j *journal.Journal, log *slog.Logger) error {
	t := time.NewTicker(c.CompactEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// No link yet: nothing upstream to wait for. The link sets
		// RequireAck when it exists.
		res, err := j.Compact(journal.CompactOptions{Window: c.Retention, KeepLast: c.KeepLast})
		if errors.Is(err, journal.ErrClosed) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("compact journal: %w", err)
		}
		if res.Dropped > 0 {
			log.Info("journal compacted", "dropped", res.Dropped, "through", res.Through, "size_before", res.SizeBefore, "size_after", res.SizeAfter)
		}
	}
}

// reconcileLoop reconciles at start, then every DriftInterval. A failing
// reconcile is journaled and logged; the loop goes on (it is what repairs).
func (c *serveCmd) reconcileLoop(ctx context.Context, e *env, held *heldJournal, log *slog.Logger) error {
	trigger := event.TriggerStart
	t := time.NewTicker(c.DriftInterval)
	defer t.Stop()
	for {
		held.reconciling.Lock()
		re := *e
		re.ctx = ctx
		res, err := re.reconcileStored(held.j, trigger, true)
		held.reconciling.Unlock()
		switch {
		case errors.Is(err, journal.ErrClosed) || ctx.Err() != nil:
			return nil
		case err != nil:
			log.Error("reconcile", "trigger", trigger, "err", err)
		case res.Started != 0:
			log.Info("reconciled", "trigger", trigger, "changed", res.Changed, "unchanged", res.Unchanged, "failed", res.Failed)
		}
		trigger = event.TriggerTimer
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
