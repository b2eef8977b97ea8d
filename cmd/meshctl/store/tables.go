package store

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/profile"
)

// MaxProfileRecord bounds a stored profile record: a source at its limit,
// every byte escaped as JSON at worst (\u00XX), and room for the rest.
const MaxProfileRecord = 6*profile.MaxBytes + 4096

// table is one bucket or stream: what it is called in errors and advice,
// and its settings.
type table struct {
	what   string
	kv     *jetstream.KeyValueConfig
	stream *jetstream.StreamConfig
}

// tables are every bucket and stream of the control plane, in the order
// Ensure makes them. The heartbeats stream is last: `meshctl nodes`
// answers once it is there, so a service that answers it has made every
// stream and bucket before it (an operator's, or a test's, enrol --batch
// right after serve starts found no labels bucket yet).
func tables(eventsMaxAge time.Duration) []table {
	events := eventsConfig(eventsMaxAge)
	states := latestOfEachNode(linkproto.StatesStream, "the latest report (projection) of every node", linkproto.AnyMeshStates, linkproto.MaxDeclarationSize)
	heartbeats := latestOfEachNode(linkproto.HeartbeatsStream, "the latest heartbeat of every node", linkproto.AnyMeshHeartbeats, linkproto.MaxReportSize)
	return []table{
		{what: "events stream", stream: &events},
		{what: "states stream", stream: &states},
		{what: "desired-state bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.DesiredBucket,
			Description: "the desired state of every node",
			History:     16,
			Storage:     jetstream.FileStorage,
		}},
		{what: "tokens bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.TokensBucket,
			Description: "every enrolment token redeemed, so none is redeemed twice; and when each node was revoked or removed, so that its earlier tokens are refused",
			History:     1,
			Storage:     jetstream.FileStorage,
		}},
		{what: "nodes bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.NodesBucket,
			Description: "every node's credential: its public key, expiry, revocation",
			History:     8,
			Storage:     jetstream.FileStorage,
		}},
		{what: "labels bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.LabelsBucket,
			Description: "every node's labels; the history keeps each change, who made it and when",
			History:     16,
			Storage:     jetstream.FileStorage,
		}},
		{what: "profiles bucket", kv: &jetstream.KeyValueConfig{
			Bucket:       linkproto.ProfilesBucket,
			Description:  "the fleet's profiles; the history keeps each change, who made it and when",
			History:      64,
			Storage:      jetstream.FileStorage,
			MaxValueSize: MaxProfileRecord,
		}},
		{what: "rollouts bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.RolloutsBucket,
			Description: "every rollout's state, which control service drives it and until when",
			History:     4,
			Storage:     jetstream.FileStorage,
		}},
		{what: "bad-releases bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.BadReleasesBucket,
			Description: "every host release a node rolled back in a rollout: no rollout delivers it again",
			History:     1,
			Storage:     jetstream.FileStorage,
		}},
		{what: "rollout events stream", stream: &jetstream.StreamConfig{
			Name:        linkproto.RolloutEventsStream,
			Description: "every step of every rollout",
			Subjects:    []string{linkproto.AnyMeshRollouts},
			Storage:     jetstream.FileStorage,
			MaxAge:      365 * 24 * time.Hour,
			MaxMsgSize:  64 << 10,
		}},
		{what: "sealing-key bucket", kv: &jetstream.KeyValueConfig{
			Bucket:      linkproto.SealKeysBucket,
			Description: "every node's public sealing key, as its enrolment told it",
			History:     4,
			Storage:     jetstream.FileStorage,
		}},
		{what: "presence bucket", kv: &jetstream.KeyValueConfig{
			Bucket:       linkproto.PresenceBucket,
			Description:  "what the broker last said of every node's connection: connected or closed, when and why",
			History:      1,
			Storage:      jetstream.FileStorage,
			MaxValueSize: maxPresenceRecord,
		}},
		{what: "heartbeats stream", stream: &heartbeats},
	}
}

// name is the bucket's or the stream's name.
func (t table) name() string {
	if t.kv != nil {
		return t.kv.Bucket
	}
	return t.stream.Name
}

// what is how errors and advice name the bucket or stream called name.
func what(name string) string {
	for _, t := range tables(0) {
		if t.name() == name {
			return t.what
		}
	}
	return "bucket"
}

// latestOfEachNode is a stream that keeps the last message of each node's
// subject, of at most maxSize bytes. No acknowledgements, as for the events
// stream: nobody waits for one.
func latestOfEachNode(name, description, subject string, maxSize int32) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              name,
		Description:       description,
		Subjects:          []string{subject},
		Storage:           jetstream.FileStorage,
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        maxSize,
		NoAck:             true,
	}
}

// eventsConfig is the events stream: one subject per record
// (linkproto.EventSubject), at most one message per subject, and a second
// one refused rather than replacing the first. A record is so stored once
// however often, and however late, it is sent, and only its node can name
// it: the broker lets nobody else publish on its subject. JetStream's
// deduplication by Nats-Msg-Id is not used: that id is a header any
// publisher sets as it likes, so a node could have the stream drop another
// node's records as duplicates of its own.
func eventsConfig(maxAge time.Duration) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:                 linkproto.EventsStream,
		Description:          "every node's journal, each record once",
		Subjects:             []string{linkproto.AnyMeshEvents},
		Storage:              jetstream.FileStorage,
		MaxMsgsPerSubject:    1,
		Discard:              jetstream.DiscardNew,
		DiscardNewPerSubject: true,
		MaxAge:               maxAge,
		// A node sends no record larger than this (it omits big
		// payloads), so a larger one is a node misbehaving: refused
		// rather than stored. The margin is for the headers.
		MaxMsgSize: linkproto.MaxEventSize + 1024,
		// No acknowledgements: the server would send them, with the
		// account's rights, to any reply subject the node chose (another
		// node's subjects, the KV bucket). Nodes ask with a Sync instead.
		NoAck: true,
		// AllowRollup stays false: a Nats-Rollup header would let a
		// message past the one-per-subject refusal, and "all" would purge
		// every node's records.
	}
}

// Handles are the buckets and streams a control service answers nodes
// from, as Ensure made them.
type Handles struct {
	Events   jetstream.Stream
	Desired  *Desired
	Tokens   jetstream.KeyValue
	Nodes    jetstream.KeyValue
	SealKeys jetstream.KeyValue
}

// Ensure creates or updates every bucket and stream of the table, in its
// order, for mesh's control service. It is idempotent and safe to run
// from several services at once. eventsMaxAge is how long the events
// stream keeps a record (zero: forever); the last service to start sets
// it.
func Ensure(ctx context.Context, js jetstream.JetStream, mesh string, eventsMaxAge time.Duration) (*Handles, error) {
	h := &Handles{}
	for _, t := range tables(eventsMaxAge) {
		if t.stream != nil {
			s, err := js.CreateOrUpdateStream(ctx, *t.stream)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", t.what, t.stream.Name, err)
			}
			if t.stream.Name == linkproto.EventsStream {
				h.Events = s
			}
			continue
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, *t.kv)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", t.what, t.kv.Bucket, err)
		}
		switch t.kv.Bucket {
		case linkproto.DesiredBucket:
			h.Desired = &Desired{kv: kv, mesh: mesh}
		case linkproto.TokensBucket:
			h.Tokens = kv
		case linkproto.NodesBucket:
			h.Nodes = kv
		case linkproto.SealKeysBucket:
			h.SealKeys = kv
		}
	}
	return h, nil
}
