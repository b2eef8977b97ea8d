package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/broker"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/fleetmetrics"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
)

// serveConfig is what serveMesh is told, read from the flags.
type serveConfig struct {
	// URLs are the brokers of an existing cluster; none: Serve embeds one.
	URLs []string
	// Listen is where the embedded broker listens for clients.
	Listen string
	// ServerNames are the names or addresses nodes reach the embedded
	// broker by: its certificate is for them too, and enrol gives them.
	ServerNames []string
	// Certificate is the embedded broker's, when the mesh's CA was
	// adopted without its key; nil: the authority issues one.
	Certificate *tls.Certificate
	// EventsMaxAge is how long the events stream keeps a record (0: forever).
	EventsMaxAge time.Duration
	// CredentialTTL is how long the node credentials it signs are valid.
	CredentialTTL time.Duration
	// PingInterval is how often the embedded broker pings a client it
	// has heard nothing from (broker.Config).
	PingInterval time.Duration
	// ReleasesListen is where to serve the releases directory over HTTP;
	// "off": not at all.
	ReleasesListen string
	// Web is the web view's; its Listen empty: none.
	Web webConfig
	Log *slog.Logger
	Now func() time.Time
	// Started, when set, is handed what serveMesh made for the HTTP side
	// to serve, before anything runs.
	Started func(serveParts)
}

// serveParts are what serveMesh makes that the HTTP side serves.
type serveParts struct {
	// Metrics are the fleet's series (/metrics): its Registry.
	Metrics *fleetmetrics.Metrics
}

// serveMesh runs the control service of a: the embedded broker (without
// cfg.URLs), the releases server, and the nodeservice.Service that answers
// every node, until ctx ends.
func serveMesh(ctx context.Context, a *authority.Authority, cfg serveConfig) error {
	log := cfg.Log
	urls := cfg.URLs
	var local nats.InProcessConnProvider // the embedded broker, if any
	if len(urls) == 0 {
		// The broker outlives the group, so that the service's connection
		// closes before the broker does rather than watching it go.
		b, err := broker.New(a, broker.Config{Listen: cfg.Listen, Log: log, ServerNames: cfg.ServerNames, Certificate: cfg.Certificate, PingInterval: cfg.PingInterval})
		if err != nil {
			return err
		}
		if err := b.Start(); err != nil {
			return err
		}
		defer b.Close()
		local = b
		// This service connects in process (nodeservice.Dial); nodes are
		// given the names the operator says they reach it by.
		urls = []string{b.URL()}
		recorded := urls
		if len(cfg.ServerNames) > 0 {
			recorded = nil
			for _, n := range cfg.ServerNames {
				recorded = append(recorded, b.URLFor(n))
			}
		}
		if err := a.SetURLs(recorded); err != nil {
			return fmt.Errorf("record the broker's address: %w", err)
		}
		log.Info("embedded broker listening", "url", b.URL(), "enrol_urls", strings.Join(recorded, ","), "tls_names", strings.Join(b.Names(), ","), "store", a.StoreDir())
	} else if err := a.SetURLs(urls); err != nil {
		return fmt.Errorf("record the broker's address: %w", err)
	}
	nc, err := nodeservice.Dial(a, urls, log, local)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The system user pushes the mesh account when enrolling a node again
	// revokes its previous key.
	sys, err := nodeservice.DialSystem(a, urls, true, log)
	if err != nil {
		return err
	}
	defer sys.Close()

	var g run.Group
	if cfg.ReleasesListen != "off" {
		// A clash is an error, not a log line: a release would later
		// point nodes at whatever holds the port. Several serves of one
		// mesh on one machine give each its own address, or off.
		if err := serveReleases(&g, a, cfg.ReleasesListen, log); err != nil {
			return fmt.Errorf("serve releases: %w", err)
		}
	} else if err := a.SetReleasesURL(""); err != nil {
		return fmt.Errorf("record the releases address: %w", err)
	}
	secrets, err := a.Secrets()
	if err != nil {
		return err
	}
	parts := serveParts{
		Metrics: fleetmetrics.New(fleetmetrics.Config{Conn: nc, Mesh: a.Mesh, Log: log, Now: cfg.Now}),
	}
	if cfg.Started != nil {
		cfg.Started(parts)
	}
	if cfg.Web.Listen != "" && cfg.Web.Listen != "off" {
		cfg.Web.Metrics = parts.Metrics.Handler(log)
		if err := serveWeb(&g, a, cfg, nc, log); err != nil {
			return fmt.Errorf("serve the web view: %w", err)
		}
	}
	{ // The declarations the nodes journal, counted as the events stream stores them.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			return parts.Metrics.Run(ctx)
		}, func(error) { cancel() })
	}
	{ // Streams and bucket in place, then every node's hello answered.
		ctx, cancel := context.WithCancel(ctx)
		svc := &nodeservice.Service{Conn: nc, Mesh: a.Mesh, Key: a.DeclarationKey(), Log: log, EventsMaxAge: cfg.EventsMaxAge,
			Issuer: &nodeservice.Accounts{A: a, Sys: sys, Now: cfg.Now}, CredentialTTL: cfg.CredentialTTL,
			Enrolled: parts.Metrics.Enrolled}
		g.Add(func() error {
			return svc.Run(ctx)
		}, func(error) { cancel() })
	}
	{ // The nodes' connections, as the broker tells the system account.
		ctx, cancel := context.WithCancel(ctx)
		p := &nodeservice.Presence{Sys: sys, Conn: nc, Mesh: a.Mesh, Account: a.AccountPublicKey(), Log: log}
		g.Add(func() error {
			return p.Run(ctx)
		}, func(error) { cancel() })
	}
	{ // The rollouts: this service drives those whose lease it holds.
		ctx, cancel := context.WithCancel(ctx)
		d := &client.RolloutDriver{Conn: nc, Mesh: a.Mesh, Key: a.DeclarationKey(), Secrets: secrets, Log: log,
			Pushed: parts.Metrics.Pushed}
		g.Add(func() error {
			return d.Run(ctx)
		}, func(error) { cancel() })
	}
	{ // The caller's ctx ends (SIGINT, SIGTERM); then the group stops.
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	return g.Run()
}

// serveReleases adds to g an HTTP server of the authority's releases
// directory on listen, and records its URL for release when the address
// names a host nodes can reach (not 0.0.0.0 or ::).
func serveReleases(g *run.Group, a *authority.Authority, listen string, log *slog.Logger) error {
	if err := os.MkdirAll(a.ReleasesDir(), 0o755); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("%w (give --releases-listen another address, or off)", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	url := ""
	if !addr.IP.IsUnspecified() {
		url = "http://" + addr.String()
	}
	if err := a.SetReleasesURL(url); err != nil {
		ln.Close()
		return fmt.Errorf("record the releases address: %w", err)
	}
	if url == "" {
		log.Warn("releases served on every address: give meshctl release --url, the base URL nodes reach", "listen", addr.String(), "dir", a.ReleasesDir())
	} else {
		log.Info("releases served", "url", url, "dir", a.ReleasesDir())
	}
	srv := &http.Server{
		Handler:           &authority.ReleaseServer{Dir: a.ReleasesDir(), Log: log},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	g.Add(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("releases server: %w", err)
		}
		return nil
	}, func(error) {
		// Downloads in flight end with the service: a node retries its
		// apply on its next reconcile.
		srv.Close()
	})
	return nil
}
