package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/linkproto"
)

// Store opens the control plane's buckets and streams for the operator's
// commands, each bucket looked up once and shared by the copies of a
// client (the rollout driver makes one a rollout step). Looking a bucket
// up asks the server for its stream's info: a rollout's wave did that
// once a node, as many requests as it made for the nodes' documents. A
// handle holds names only, so one kept stays good while its bucket
// exists, and a bucket not found is not kept.
type Store struct {
	js jetstream.JetStream

	mu sync.Mutex
	kv map[string]jetstream.KeyValue
}

// New returns the store of the cluster js reaches.
func New(js jetstream.JetStream) *Store {
	return &Store{js: js, kv: map[string]jetstream.KeyValue{}}
}

// KV is the bucket name. One that does not exist is told with the advice
// to start the control service, which makes it.
func (s *Store) KV(ctx context.Context, name string) (jetstream.KeyValue, error) {
	s.mu.Lock()
	kv := s.kv[name]
	s.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := s.js.KeyValue(ctx, name)
	if err != nil {
		return nil, notServed("the "+what(name)+" "+name, err)
	}
	s.mu.Lock()
	s.kv[name] = kv
	s.mu.Unlock()
	return kv, nil
}

// Stream is the stream name, told as KV tells a bucket.
func (s *Store) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, notServed("the stream "+name, err)
	}
	return st, nil
}

// Desired is mesh's desired-state record.
func (s *Store) Desired(ctx context.Context, mesh string) (*Desired, error) {
	kv, err := s.KV(ctx, linkproto.DesiredBucket)
	if err != nil {
		return nil, err
	}
	return &Desired{kv: kv, mesh: mesh}, nil
}

// notServed turns a missing stream or bucket into advice: they are created
// by the control service.
func notServed(what string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		return fmt.Errorf("%s does not exist yet: start `meshctl serve` once against this broker: %w", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
