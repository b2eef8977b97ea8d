package control

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/mesh-host/mesh-host/linkproto"
)

// BrokerConfig says how to run the embedded broker.
type BrokerConfig struct {
	// Listen is host:port for clients; port 0 or -1 picks a free port.
	Listen string
	// StoreDir is JetStream's directory; empty means the authority's.
	StoreDir string
	// Log receives the broker's warnings and errors; nil discards them.
	Log *slog.Logger
	// ReadyTimeout bounds the wait for the broker to accept connections;
	// zero means 10 seconds.
	ReadyTimeout time.Duration
}

// Broker is an embedded NATS server with JetStream, in operator mode: it
// trusts only the authority's operator and knows the system and mesh
// accounts from its resolver directory in the data directory, so it needs
// no account server.
type Broker struct {
	srv   *server.Server
	ready time.Duration
}

// NewBroker configures the embedded broker for a. It does not start it.
func NewBroker(a *Authority, cfg BrokerConfig) (*Broker, error) {
	host, portText, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", cfg.Listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < -1 || port > 65535 {
		return nil, fmt.Errorf("listen address %q: bad port", cfg.Listen)
	}
	if port == 0 {
		// The server reads port 0 as "the default, 4222".
		port = server.RANDOM_PORT
	}
	if host == "" {
		host = "0.0.0.0"
	}
	storeDir := cfg.StoreDir
	if storeDir == "" {
		storeDir = a.StoreDir()
	}
	// A "full" resolver, as a configured cluster has (NATSConfig): it
	// takes the account JWT `meshctl revoke` pushes at runtime and keeps
	// it in the data directory. The latest mesh.jwt is preloaded, and a
	// preload older than what the directory holds is ignored, so the
	// account the broker enforces never goes backwards.
	resolver, err := server.NewDirAccResolver(a.ResolverDir(), 0, 0, server.NoDelete)
	if err != nil {
		return nil, fmt.Errorf("the account resolver in %s: %w", a.ResolverDir(), err)
	}
	if err := resolver.Store(a.systemPub, a.systemJWT); err != nil {
		resolver.Close()
		return nil, err
	}
	if err := resolver.Store(a.accountPub, a.accountJWT); err != nil {
		resolver.Close()
		return nil, err
	}
	opts := &server.Options{
		ServerName:       "meshctl-" + a.Mesh,
		Host:             host,
		Port:             port,
		TrustedOperators: []*jwt.OperatorClaims{a.operator},
		SystemAccount:    a.systemPub,
		AccountResolver:  resolver,
		JetStream:        true,
		StoreDir:         storeDir,
		// Anything the broker carries a node can at least refuse by name.
		MaxPayload: linkproto.MaxDeclarationSize,
		// The process's own signal handling stops the broker.
		NoSigs: true,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		resolver.Close()
		return nil, fmt.Errorf("configure the broker: %w", err)
	}
	if cfg.Log != nil {
		srv.SetLoggerV2(slogLogger{cfg.Log}, false, false, false)
	}
	ready := cfg.ReadyTimeout
	if ready == 0 {
		ready = 10 * time.Second
	}
	return &Broker{srv: srv, ready: ready}, nil
}

// Start starts the broker and waits until it accepts connections.
func (b *Broker) Start() error {
	b.srv.Start()
	if !b.srv.ReadyForConnections(b.ready) {
		b.Close()
		return fmt.Errorf("the broker did not accept connections within %v", b.ready)
	}
	return nil
}

// URL is the address clients connect to, with the real port.
func (b *Broker) URL() string { return b.srv.ClientURL() }

// Close stops the broker and waits for it to finish.
func (b *Broker) Close() {
	b.srv.Shutdown()
	b.srv.WaitForShutdown()
}

// slogLogger passes the broker's warnings and errors to slog and drops its
// notices, debug and trace lines: the broker's chatter is not the
// service's, but its trouble is.
type slogLogger struct{ log *slog.Logger }

var _ server.Logger = slogLogger{}

func (l slogLogger) Noticef(string, ...any) {}
func (l slogLogger) Debugf(string, ...any)  {}
func (l slogLogger) Tracef(string, ...any)  {}
func (l slogLogger) Warnf(format string, v ...any) {
	l.log.Warn(fmt.Sprintf(format, v...), "component", "broker")
}
func (l slogLogger) Errorf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...), "component", "broker")
}
func (l slogLogger) Fatalf(format string, v ...any) {
	l.log.Error(fmt.Sprintf(format, v...), "component", "broker", "fatal", true)
}
