package client

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Recent says what RecentRecords read.
type Recent struct {
	// Read is how many records were handed on.
	Read int
	// Capped says there were more since then than the limit: the
	// records read are the latest ones, from From on.
	Capped bool
	// From is when the oldest record handed on was stored (zero: none).
	From time.Time
}

// RecentRecords calls fn with the records of every node of the mesh that
// the events stream stored since since, in the order it stored them, and
// at most limit of them: when there are more, the latest limit. It reads
// what was there when it started, never a node's whole history: what a
// fleet-wide picture of the last hours can afford to read on every look.
// Messages that are not records are skipped, as Records skips them.
func (c *Client) RecentRecords(ctx context.Context, since time.Time, limit int, fn func(node string, r event.Record)) (Recent, error) {
	var got Recent
	events, err := c.store.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		return got, err
	}
	// Every node's records: the node's token is a wildcard.
	subject := linkproto.NodeEvents(c.Mesh, "*")
	cfg := jetstream.ConsumerConfig{FilterSubject: subject, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &since}
	p, err := store.NewPuller(ctx, events, cfg)
	if err != nil {
		return got, fmt.Errorf("read the mesh's recent events: %w", err)
	}
	if pending := p.Pending(); pending > uint64(limit) {
		// More than the limit since then: start limit messages before the
		// stream's end instead, so that the latest hours are the ones read.
		p.Close(ctx)
		info, err := events.Info(ctx)
		if err != nil {
			return got, err
		}
		got.Capped = true
		start := uint64(1)
		if info.State.LastSeq > uint64(limit) {
			start = info.State.LastSeq - uint64(limit) + 1
		}
		cfg.DeliverPolicy, cfg.OptStartTime, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, nil, start
		if p, err = store.NewPuller(ctx, events, cfg); err != nil {
			return got, fmt.Errorf("read the mesh's recent events: %w", err)
		}
	}
	defer p.Close(ctx)
	_, err = p.Drain(ctx, fetchBatch, dialTimeout, func(m jetstream.Msg, md *jetstream.MsgMetadata) bool {
		_, node, _, perr := linkproto.ParseEventSubject(m.Subject())
		r, rerr := subjectRecord(m.Subject(), m.Data())
		if perr == nil && rerr == nil {
			if got.Read == 0 {
				got.From = md.Timestamp
			}
			got.Read++
			fn(node, r)
		}
		return got.Read < limit
	})
	if err != nil {
		return got, fmt.Errorf("read the mesh's recent events: %w", err)
	}
	return got, nil
}
