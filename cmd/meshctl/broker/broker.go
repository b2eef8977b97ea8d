// Package broker is the embedded NATS server a `meshctl serve` runs when
// it is not told to serve an existing cluster: JetStream on, operator mode
// trusting the authority's operator only, TLS only, with a certificate the
// mesh's CA issues it and that it renews itself, its warnings passed to
// slog.
//
// It is not the control service (which connects to a broker, this one or
// another) and not the authority (which it is told, to read keys from).
package broker

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Config says how to run the embedded broker.
type Config struct {
	// Listen is host:port for clients; port 0 or -1 picks a free port.
	Listen string
	// StoreDir is JetStream's directory; empty means the authority's.
	StoreDir string
	// Log receives the broker's warnings and errors; nil discards them.
	Log *slog.Logger
	// ReadyTimeout bounds the wait for the broker to accept connections;
	// zero means 10 seconds.
	ReadyTimeout time.Duration
	// ServerNames are names clients reach the broker by besides those of
	// the machine and the listen address: its certificate is for all.
	ServerNames []string
	// Certificate is the broker's certificate, when the operator gives
	// one; nil means one the mesh's CA issues (its key must be held).
	Certificate *tls.Certificate
	// Now is the clock certificates are issued by; time.Now when nil.
	Now func() time.Time
	// PingInterval is how often the broker pings a client it has heard
	// nothing from; DefaultPingInterval when 0.
	PingInterval time.Duration
}

// DefaultPingInterval and maxPingsOut are how the broker finds a client
// that is gone without a word (a cut network, a machine that froze): it
// pings one it has heard nothing from for PingInterval, and closes the
// connection ("Stale Connection") when maxPingsOut are unanswered at the
// next tick, 60–80 s after it last heard from it at the default. The
// control plane then records the node disconnected (nodeservice.Presence),
// well before its heartbeats would make it silent (three 60 s intervals).
// A host pings the broker as often (link.DefaultPingInterval), so while a
// link is healthy these pings are never sent: nats-server skips a ping to
// a client it heard from within the interval. nats-server's defaults (2
// minutes, 2) would take six.
const (
	DefaultPingInterval = 20 * time.Second
	maxPingsOut         = 2
)

// Broker is an embedded NATS server with JetStream, in operator mode: it
// trusts only the authority's operator and knows the system and mesh
// accounts from its resolver directory in the data directory, so it needs
// no account server. It serves TLS only, with a certificate from the
// mesh's CA, so that a node can tell it from any other server at its
// address.
type Broker struct {
	srv   *server.Server
	ready time.Duration
	host  string // what clients on this machine connect to
	names []string
}

// New configures the embedded broker for a. It does not start it.
func New(a *authority.Authority, cfg Config) (*Broker, error) {
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
	names := serverNames(host, cfg.ServerNames)
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.Certificate != nil {
		tlsConfig.Certificates = []tls.Certificate{*cfg.Certificate}
	} else {
		if !a.HoldsCAKey() {
			return nil, fmt.Errorf("%w: the embedded broker cannot issue itself a certificate: give --tls-cert and --tls-key (issued by your CA for the broker's names), or serve an existing cluster with --nats", authority.ErrNoCAKey)
		}
		sc := &serverCert{now: now, issue: func(now time.Time) (tls.Certificate, error) { return a.IssueServerCert(names, now) }}
		// Issued now, so that a CA that cannot issue fails the start
		// rather than every handshake.
		if _, err := sc.get(nil); err != nil {
			return nil, err
		}
		tlsConfig.GetCertificate = sc.get
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
	systemPub, systemJWT := a.SystemAccount()
	if err := resolver.Store(systemPub, systemJWT); err != nil {
		resolver.Close()
		return nil, err
	}
	if err := resolver.Store(a.Account()); err != nil {
		resolver.Close()
		return nil, err
	}
	opts := &server.Options{
		ServerName:       "meshctl-" + a.Mesh,
		Host:             host,
		Port:             port,
		TrustedOperators: []*jwt.OperatorClaims{a.Operator()},
		SystemAccount:    systemPub,
		AccountResolver:  resolver,
		JetStream:        true,
		StoreDir:         storeDir,
		// Anything the broker carries a node can at least refuse by name.
		MaxPayload: linkproto.MaxDeclarationSize,
		// The process's own signal handling stops the broker.
		NoSigs: true,
		// The broker keeps the last closed connections for its monitoring
		// (10,000 by default, each with its JWT and subscriptions), which
		// nothing here serves: a fleet's enrolment connections alone
		// would fill it, a kilobyte a node.
		MaxClosedClients: 16,
		PingInterval:     cmp.Or(cfg.PingInterval, DefaultPingInterval),
		MaxPingsOut:      maxPingsOut,
		// TLS only; clients are still authenticated by their credentials,
		// not by certificates.
		TLS:        true,
		TLSConfig:  tlsConfig,
		TLSTimeout: 5,
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
	local := host
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		local = "127.0.0.1"
		if ip.To4() == nil {
			local = "::1"
		}
	}
	return &Broker{srv: srv, ready: ready, host: local, names: names}, nil
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

// URL is the address clients on this machine connect to, with the real
// port: the listen address, or loopback when it is every address.
func (b *Broker) URL() string { return b.URLFor(b.host) }

// URLFor is the address of the broker by host, one of its names.
func (b *Broker) URLFor(host string) string {
	return "tls://" + net.JoinHostPort(host, strconv.Itoa(b.port()))
}

func (b *Broker) port() int {
	addr, _ := b.srv.Addr().(*net.TCPAddr)
	if addr == nil {
		return 0 // not started
	}
	return addr.Port
}

// InProcessConn is a connection to the broker within this process, for a
// NATS client's InProcessServer option: no socket, the same
// authentication.
func (b *Broker) InProcessConn() (net.Conn, error) { return b.srv.InProcessConn() }

// Connz lists the broker's connections as its monitoring endpoint would,
// which the embedded broker does not serve: how a check tells who is
// connected, and how.
func (b *Broker) Connz(opts *server.ConnzOptions) (*server.Connz, error) { return b.srv.Connz(opts) }

// Names are the names and addresses the broker's certificate is for.
func (b *Broker) Names() []string { return b.names }

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

// serverNames are the names a broker listening on host is reached by, for
// its certificate: host itself, or every address of the machine when host
// is unspecified (0.0.0.0, ::, empty); the machine's hostname; localhost
// and the loopback addresses; and extra, the names the operator gives.
func serverNames(host string, extra []string) []string {
	names := slices.Clone(extra)
	ip := net.ParseIP(host)
	switch {
	case host == "" || (ip != nil && ip.IsUnspecified()):
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLinkLocalUnicast() {
				names = append(names, n.IP.String())
			}
		}
	default:
		names = append(names, host)
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
		if short, _, ok := strings.Cut(h, "."); ok {
			names = append(names, short)
		}
	}
	names = append(names, "localhost", "127.0.0.1", "::1")
	var out []string
	for _, n := range names {
		if n = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(n)), "."); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// serverCert hands the embedded broker its certificate for each
// handshake, issuing a new one (and key) when the one it has nears its
// end: the broker's key lives in memory only, and a service that runs for
// years is never caught with an expired certificate.
type serverCert struct {
	issue func(now time.Time) (tls.Certificate, error)
	now   func() time.Time

	mu   sync.Mutex
	cert *tls.Certificate
}

func (s *serverCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cert == nil || now.After(s.cert.Leaf.NotAfter.Add(-serverRenew)) {
		c, err := s.issue(now)
		if err != nil {
			return nil, err
		}
		s.cert = &c
	}
	return s.cert, nil
}

// serverRenew is how long before its certificate ends the embedded
// broker issues itself a new one.
const serverRenew = 30 * 24 * time.Hour
