package client

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
)

// Dial connects to urls (or, when none, the addresses control.json
// records) as the control user, for one operator command: it fails at once
// when the broker is not there rather than waiting for it. The broker must
// prove itself with a certificate from the mesh's CA, whatever the URLs'
// scheme.
func Dial(a *authority.Authority, urls []string) (*nats.Conn, error) {
	tc, err := a.ClientTLS()
	if err != nil {
		return nil, err
	}
	if len(urls) == 0 {
		if urls, err = a.URLs(); err != nil {
			return nil, err
		}
	}
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w: give --nats, or start `meshctl serve` (it records where it listens)", ErrNoBroker)
	}
	nc, err := nats.Connect(strings.Join(urls, ","),
		nats.UserCredentials(a.ControlCreds()),
		nats.Secure(tc),
		nats.Name("meshctl"),
		nats.Timeout(dialTimeout),
	)
	if errors.Is(err, nats.ErrNoServers) {
		return nil, fmt.Errorf("connect to %s: %w (is `meshctl serve` running, or --nats right?)", strings.Join(urls, ","), err)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", strings.Join(urls, ","), err)
	}
	return nc, nil
}

// dialTimeout bounds one connection attempt, and a wait for a stream's
// next messages.
const dialTimeout = 5 * time.Second

// Client runs the operator's operations on one mesh over a control-user
// connection.
type Client struct {
	Conn *nats.Conn
	Mesh string
	// Now is the clock heartbeats' ages are measured by.
	Now func() time.Time
	// Key signs what the client declares (the authority's declaration
	// key), and Operator is who it says declared it.
	Key      nkeys.KeyPair
	Operator string
	// Secrets holds the values of the secrets declarations name, sealed
	// to each node as it is declared; nil when the client declares none.
	Secrets *authority.Secrets
	js      jetstream.JetStream
	store   *store.Store
}

// NewClient returns a client of mesh over nc.
func NewClient(nc *nats.Conn, mesh string) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{Conn: nc, Mesh: mesh, Now: time.Now, js: js, store: store.New(js)}, nil
}
