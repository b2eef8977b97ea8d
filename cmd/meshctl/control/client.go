package control

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/linkproto"
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
	buckets *bucketCache
}

// bucketCache holds the key-value buckets a client has looked up, shared by its
// copies (the rollout driver makes one a rollout step). Looking a bucket
// up asks the server for its stream's info: a rollout's wave did that once
// a node, as many requests as it made for the nodes' documents. A handle
// holds names only, so one kept stays good while its bucket exists, and a
// bucket not found is not kept.
type bucketCache struct {
	mu sync.Mutex
	kv map[string]jetstream.KeyValue
}

// NewClient returns a client of mesh over nc.
func NewClient(nc *nats.Conn, mesh string) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Client{Conn: nc, Mesh: mesh, Now: time.Now, js: js, buckets: &bucketCache{kv: map[string]jetstream.KeyValue{}}}, nil
}

// bucket is the key-value bucket name, looked up once.
func (c *Client) bucket(ctx context.Context, name string) (jetstream.KeyValue, error) {
	c.buckets.mu.Lock()
	kv := c.buckets.kv[name]
	c.buckets.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := c.js.KeyValue(ctx, name)
	if err != nil {
		return nil, err
	}
	c.buckets.mu.Lock()
	c.buckets.kv[name] = kv
	c.buckets.mu.Unlock()
	return kv, nil
}

// notServed turns a missing stream or bucket into advice: they are created
// by the control service.
func notServed(what string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%s does not exist yet: start `meshctl serve` once against this broker: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func (c *Client) desired(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.bucket(ctx, linkproto.DesiredBucket)
	if err != nil {
		return nil, notServed("the desired-state bucket "+linkproto.DesiredBucket, err)
	}
	return kv, nil
}

func (c *Client) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, notServed("the stream "+name, err)
	}
	return s, nil
}
