package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/oklog/run"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/web"
)

// webConfig is how serve runs the web view (serveConfig's part).
type webConfig struct {
	// Listen is where; "" or "off": nowhere.
	Listen string
	// MetricsOpen serves /metrics without a token.
	MetricsOpen bool
	// Metrics serves /metrics; nil: none.
	Metrics http.Handler
}

// serveWeb adds to g the web view on cfg.Web.Listen: plain HTTP on a
// loopback address, TLS only on any other, with a certificate from the
// mesh's CA (or the one serve was given when the CA's key is not here).
func serveWeb(g *run.Group, a *authority.Authority, cfg serveConfig, nc *nats.Conn, log *slog.Logger) error {
	w := cfg.Web
	c, err := client.NewClient(nc, a.Mesh)
	if err != nil {
		return err
	}
	tokens, err := a.WebVerifier()
	if err != nil {
		return fmt.Errorf("the web key: %w", err)
	}
	ln, err := net.Listen("tcp", w.Listen)
	if err != nil {
		return fmt.Errorf("%w (give --http-listen another address)", err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	secure := !addr.IP.IsLoopback()
	if secure {
		cert, err := webCertificate(a, cfg, addr)
		if err != nil {
			ln.Close()
			return err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	view, err := web.New(web.Config{Client: c, Mesh: a.Mesh, Tokens: tokens, Metrics: w.Metrics, MetricsOpen: w.MetricsOpen, Secure: secure, Log: log, Now: cfg.Now})
	if err != nil {
		ln.Close()
		return err
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	log.Info("web view served", "url", scheme+"://"+addr.String(), "metrics_open", w.MetricsOpen)
	srv := &http.Server{
		Handler:           view,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	g.Add(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("web view: %w", err)
		}
		return nil
	}, func(error) { srv.Close() })
	return nil
}

// webCertificate is the web view's certificate off loopback: issued by the
// mesh's CA for the names nodes reach this service by (--server-name), the
// address it listens on when it names one, and the host name it runs on; or,
// where the CA's key is not held, the certificate serve was given.
func webCertificate(a *authority.Authority, cfg serveConfig, addr *net.TCPAddr) (tls.Certificate, error) {
	if !a.HoldsCAKey() {
		if cfg.Certificate == nil {
			return tls.Certificate{}, errors.New("--http-listen off loopback serves TLS only, and this authority holds the CA's certificate without its key: give --tls-cert and --tls-key, or listen on a loopback address")
		}
		return *cfg.Certificate, nil
	}
	names := append([]string(nil), cfg.ServerNames...)
	if !addr.IP.IsUnspecified() {
		names = append(names, addr.IP.String())
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		names = append(names, host)
	}
	names = append(names, "localhost")
	return a.IssueServerCert(names, cfg.Now())
}
