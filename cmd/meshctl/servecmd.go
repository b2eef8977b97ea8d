package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/meshctl/control"
)

// serveCmd is the control service: with --nats it serves a mesh on an
// existing broker; without, it embeds one.
type serveCmd struct {
	Mesh         string        `name:"mesh" placeholder:"NAME" help:"The mesh's name, if the authority is created now (default \"home\")."`
	Listen       string        `name:"listen" default:"127.0.0.1:4222" placeholder:"HOST:PORT" help:"Where the embedded broker listens for clients (port 0: any free port)."`
	EventsMaxAge time.Duration `name:"events-max-age" default:"0s" help:"How long the events stream keeps a record (0: forever)."`
	LogLevel     slog.Level    `name:"log-level" default:"info" placeholder:"LEVEL" help:"Least level logged: debug, info, warn or error."`
}

func (c *serveCmd) Run(e *env) error {
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	a, created, err := control.Init(e.cli.Data, c.Mesh)
	if err != nil {
		return err
	}
	if created {
		log.Info("created the authority", "mesh", a.Mesh, "dir", a.Dir)
	}

	urls := e.cli.NATS
	if len(urls) == 0 {
		// The broker outlives the group, so that the service's connection
		// closes before the broker does rather than watching it go.
		b, err := control.NewBroker(a, control.BrokerConfig{Listen: c.Listen, Log: log})
		if err != nil {
			return failed("%v", err)
		}
		if err := b.Start(); err != nil {
			return failed("%v", err)
		}
		defer b.Close()
		urls = []string{b.URL()}
		log.Info("embedded broker listening", "url", b.URL(), "store", a.StoreDir())
	}
	if err := a.SetURLs(urls); err != nil {
		return failed("record the broker's address: %v", err)
	}
	nc, err := control.DialService(a, urls, log)
	if err != nil {
		return failed("%v", err)
	}
	defer nc.Close()

	var g run.Group
	{ // Streams and bucket in place, then every node's hello answered.
		ctx, cancel := context.WithCancel(e.ctx)
		svc := &control.Service{Conn: nc, Mesh: a.Mesh, Log: log, EventsMaxAge: c.EventsMaxAge}
		g.Add(func() error {
			return svc.Run(ctx)
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
	log.Info("meshctl stopped")
	return nil
}
