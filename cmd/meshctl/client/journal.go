package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/internal/journalview"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// fetchBatch is how many records one fetch of the events stream asks for.
const fetchBatch = 512

// Records calls fn with each of node's records the events stream holds,
// in the order the stream stored them, from journal sequence from on. It
// reads what was there when it started and returns; it works whether or
// not the node is online. A record's sequence is its subject's (only the
// node may publish there); messages that are not records, or whose body
// names another sequence than their subject, are the node misbehaving:
// skipped and counted in the error returned at the end.
func (c *Client) Records(ctx context.Context, node string, from uint64, fn func(event.Record) error) error {
	if err := linkproto.ValidName(node); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	events, err := c.store.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		return err
	}
	subject := linkproto.NodeEvents(c.Mesh, node)
	last, err := events.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("the events of %s: %w", node, err)
	}
	p, err := store.NewPuller(ctx, events, jetstream.ConsumerConfig{FilterSubject: subject})
	if err != nil {
		return fmt.Errorf("read the events of %s: %w", node, err)
	}
	defer p.Close(ctx)
	var bad int
	var fnErr error
	// A fetch that brings none is the last message gone (its age ran
	// out) while reading: there is no more.
	_, err = p.Drain(ctx, fetchBatch, dialTimeout, func(m jetstream.Msg, md *jetstream.MsgMetadata) bool {
		r, err := subjectRecord(m.Subject(), m.Data())
		switch {
		case err != nil:
			bad++
		case r.Seq >= from:
			fnErr = fn(r)
		}
		// What was there when it started: a node online goes on
		// publishing.
		return fnErr == nil && md.Sequence.Stream < last.Sequence
	})
	if err != nil {
		return fmt.Errorf("read the events of %s: %w", node, err)
	}
	if fnErr != nil {
		return fnErr
	}
	if bad > 0 {
		return fmt.Errorf("%d messages of %s's events are not journal records, or not the record their subject names", bad, node)
	}
	return nil
}

// subjectRecord decodes an events message's body as the record its subject
// names.
func subjectRecord(subj string, body []byte) (event.Record, error) {
	_, _, seq, err := linkproto.ParseEventSubject(subj)
	if err != nil {
		return event.Record{}, err
	}
	var r event.Record
	if err := json.Unmarshal(body, &r); err != nil {
		return event.Record{}, fmt.Errorf("%s: %w", subj, err)
	}
	if r.Seq != seq {
		return event.Record{}, fmt.Errorf("%s: the body says record %d", subj, r.Seq)
	}
	return r, nil
}

// HasRecords reports whether the events stream holds any record of node.
func (c *Client) HasRecords(ctx context.Context, node string) (bool, error) {
	if err := linkproto.ValidName(node); err != nil {
		return false, err
	}
	events, err := c.store.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		return false, err
	}
	_, err = events.GetLastMsgForSubject(ctx, linkproto.NodeEvents(c.Mesh, node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Why returns what `journal --why` shows of node's resource
// (journalview.Why): the cause chain behind its latest record, newest
// first, down to the first record of a kind that starts a chain
// (journalview.IsOrigin), or as far as the events stream holds it; for a
// repaired drift, the node's declaration in force (its latest
// declaration.received) when it declares resource as the repair restored
// it; and the first declaration after that latest record that no longer
// declares resource, if any.
func (c *Client) Why(ctx context.Context, node, resource string) (why journalview.Why, err error) {
	bySeq := map[uint64]event.Record{}
	var latest, declared uint64
	var declarations []uint64 // in order
	err = c.Records(ctx, node, 1, func(r event.Record) error {
		bySeq[r.Seq] = r
		if r.Resource == resource && r.Seq > latest {
			latest = r.Seq
		}
		if r.Kind == event.DeclarationReceived {
			declared = max(declared, r.Seq)
			declarations = append(declarations, r.Seq)
		}
		return nil
	})
	if err != nil {
		return why, err
	}
	if latest == 0 {
		return why, fmt.Errorf("%w: no record of %s names resource %q", ErrNoRecord, node, resource)
	}
	for seq := latest; seq != 0; {
		r, ok := bySeq[seq]
		if !ok {
			break
		}
		why.Chain = append(why.Chain, r)
		if journalview.IsOrigin(r.Kind) || r.Cause >= r.Seq {
			break
		}
		seq = r.Cause
	}
	if spec, ok := journalview.Restored(why.Chain); ok && declared != 0 {
		if d := bySeq[declared]; journalview.HeldBy(d, resource, spec) {
			why.HeldBy = &d
		}
	}
	for _, seq := range declarations {
		if d := bySeq[seq]; seq > latest && !journalview.Declares(d, resource) {
			why.DroppedBy = &d
			break
		}
	}
	return why, nil
}
