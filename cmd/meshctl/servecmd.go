package main

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/internal/tuning"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// serveCmd is the control service: with --nats it serves a mesh on an
// existing broker; without, it embeds one.
type serveCmd struct {
	Mesh          string        `name:"mesh" placeholder:"NAME" help:"The mesh's name, if the authority is created now (default \"home\")."`
	Listen        string        `name:"listen" default:"127.0.0.1:4222" placeholder:"HOST:PORT" help:"Where the embedded broker listens for clients (port 0: any free port)."`
	ServerName    []string      `name:"server-name" placeholder:"NAME" help:"A name or address nodes reach the embedded broker by (repeatable): its certificate is for it too, and enrol gives nodes these."`
	TLSCert       string        `name:"tls-cert" placeholder:"FILE" type:"existingfile" help:"The embedded broker's certificate (PEM), when the mesh's CA was adopted without its key."`
	TLSKey        string        `name:"tls-key" placeholder:"FILE" type:"existingfile" help:"The key of --tls-cert (PEM)."`
	EventsMaxAge  time.Duration `name:"events-max-age" default:"0s" help:"How long the events stream keeps a record (0: forever)."`
	CredentialTTL time.Duration `name:"credential-ttl" default:"720h" help:"How long the node credentials it signs are valid; nodes renew them when a half to a third is left."`
	PingInterval  time.Duration `name:"ping-interval" default:"20s" help:"How often the embedded broker pings a client it has heard nothing from; when two go unanswered, the next tick closes the connection and the node shows disconnected (60-80 s at the default)."`
	LogLevel      slog.Level    `name:"log-level" default:"info" placeholder:"LEVEL" help:"Least level logged: debug, info, warn or error."`
	// Releases are files nodes fetch, beside the broker rather than
	// through it: an archive is larger than any message the link carries.
	HTTPListen     string `name:"http-listen" default:"off" placeholder:"HOST:PORT" help:"Where to serve the read-only web view and the fleet's /metrics (\"off\": nowhere). A loopback address serves HTTP; any other serves TLS only, with a certificate from the mesh's CA. Every page asks for a token of meshctl web token."`
	MetricsOpen    bool   `name:"metrics-open" help:"Serve /metrics of --http-listen without a token (a scraper on a trusted network); otherwise it asks for one as a bearer token."`
	ReleasesListen string `name:"releases-listen" default:"127.0.0.1:4280" placeholder:"HOST:PORT" help:"Where to serve DATA/releases over HTTP for nodes to fetch host releases (port 0: any free port; \"off\": not at all)."`
}

func (c *serveCmd) Run(e *env) error {
	tuning.ControlService()
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	a, created, err := authority.Init(e.cli.Data, c.Mesh)
	if err != nil {
		return err
	}
	if created {
		log.Info("created the authority", "mesh", a.Mesh, "dir", a.Dir)
	}
	cfg := serveConfig{
		URLs:           e.cli.NATS,
		Listen:         c.Listen,
		ServerNames:    c.ServerName,
		EventsMaxAge:   c.EventsMaxAge,
		CredentialTTL:  c.CredentialTTL,
		PingInterval:   c.PingInterval,
		ReleasesListen: c.ReleasesListen,
		Web:            webConfig{Listen: c.HTTPListen, MetricsOpen: c.MetricsOpen},
		Log:            log,
		Now:            time.Now,
	}
	if len(cfg.URLs) == 0 {
		if (c.TLSCert == "") != (c.TLSKey == "") {
			return command.Refused("--tls-cert and --tls-key go together")
		}
		if c.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
			if err != nil {
				return command.Refused("--tls-cert: %v", err)
			}
			cfg.Certificate = &cert
		}
	}
	// The broker's connections leave their goroutines' stacks grown by
	// their writes; see tuning.SettleStacks.
	ctx, stop := context.WithCancel(e.ctx)
	defer stop()
	go tuning.SettleStacks(ctx, log)
	if err := serveMesh(ctx, a, cfg); err != nil {
		return failed("%v", err)
	}
	log.Info("meshctl stopped")
	return nil
}
