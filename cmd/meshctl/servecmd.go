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

	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/meshctl/control"
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
	CredentialTTL time.Duration `name:"credential-ttl" default:"720h" help:"How long the node credentials it signs are valid; nodes renew them when a third is left."`
	LogLevel      slog.Level    `name:"log-level" default:"info" placeholder:"LEVEL" help:"Least level logged: debug, info, warn or error."`
	// Releases are files nodes fetch, beside the broker rather than
	// through it: an archive is larger than any message the link carries.
	ReleasesListen string `name:"releases-listen" default:"127.0.0.1:4280" placeholder:"HOST:PORT" help:"Where to serve DATA/releases over HTTP for nodes to fetch host releases (port 0: any free port; \"off\": not at all)."`
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
		bc := control.BrokerConfig{Listen: c.Listen, Log: log, ServerNames: c.ServerName}
		if (c.TLSCert == "") != (c.TLSKey == "") {
			return refused("--tls-cert and --tls-key go together")
		}
		if c.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
			if err != nil {
				return refused("--tls-cert: %v", err)
			}
			bc.Certificate = &cert
		}
		b, err := control.NewBroker(a, bc)
		if err != nil {
			return failed("%v", err)
		}
		if err := b.Start(); err != nil {
			return failed("%v", err)
		}
		defer b.Close()
		// This service connects over loopback (or the listen address);
		// nodes are given the names the operator says they reach it by.
		urls = []string{b.URL()}
		recorded := urls
		if len(c.ServerName) > 0 {
			recorded = nil
			for _, n := range c.ServerName {
				recorded = append(recorded, b.URLFor(n))
			}
		}
		if err := a.SetURLs(recorded); err != nil {
			return failed("record the broker's address: %v", err)
		}
		log.Info("embedded broker listening", "url", b.URL(), "enrol_urls", strings.Join(recorded, ","), "tls_names", strings.Join(b.Names(), ","), "store", a.StoreDir())
	} else if err := a.SetURLs(urls); err != nil {
		return failed("record the broker's address: %v", err)
	}
	nc, err := control.DialService(a, urls, log)
	if err != nil {
		return failed("%v", err)
	}
	defer nc.Close()
	// The system user pushes the mesh account when enrolling a node again
	// revokes its previous key.
	sys, err := control.DialSystem(a, urls, true, log)
	if err != nil {
		return failed("%v", err)
	}
	defer sys.Close()

	var g run.Group
	if c.ReleasesListen != "off" {
		// A clash is an error, not a log line: a release would later
		// point nodes at whatever holds the port. Several serves of one
		// mesh on one machine give each its own address, or off.
		if err := c.serveReleases(&g, a, log); err != nil {
			return failed("serve releases: %v", err)
		}
	} else if err := a.SetReleasesURL(""); err != nil {
		return failed("record the releases address: %v", err)
	}
	{ // Streams and bucket in place, then every node's hello answered.
		ctx, cancel := context.WithCancel(e.ctx)
		svc := &control.Service{Conn: nc, Mesh: a.Mesh, Key: a.DeclarationKey(), Log: log, EventsMaxAge: c.EventsMaxAge,
			Issuer: &control.Accounts{A: a, Sys: sys, Now: time.Now}, CredentialTTL: c.CredentialTTL}
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

// serveReleases adds to g an HTTP server of the authority's releases
// directory on c.ReleasesListen, and records its URL for release when the
// address names a host nodes can reach (not 0.0.0.0 or ::).
func (c *serveCmd) serveReleases(g *run.Group, a *control.Authority, log *slog.Logger) error {
	if err := os.MkdirAll(a.ReleasesDir(), 0o755); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.ReleasesListen)
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
		Handler:           &control.ReleaseServer{Dir: a.ReleasesDir(), Log: log},
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
