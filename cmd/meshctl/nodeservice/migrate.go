package nodeservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// legacySeqHeader is the header that carried a record's sequence when
// every record of a node went on one subject.
const legacySeqHeader = "Mesh-Seq"

// moveBatch is how many records each fetch of the move asks for.
const moveBatch = 512

// migrateEvents moves the records of an events stream made before the
// sequence went into the subject (linkproto.LegacyAnyMeshEvents: all of a
// node's records on one subject) each to its own subject. It runs before
// the stream takes its limit of one message per subject, which would
// otherwise keep only the last record of each node. Every step can be run
// again: a service stopped half way finishes the move when it next starts.
// It can go, with linkproto.LegacyAnyMeshEvents, once no events stream
// holds records of nodes before ProtocolVersion 2.
func (s *Service) migrateEvents(ctx context.Context, js jetstream.JetStream) error {
	st, err := js.Stream(ctx, linkproto.EventsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	cfg := st.CachedInfo().Config
	if !slices.Contains(cfg.Subjects, linkproto.LegacyAnyMeshEvents) {
		return nil
	}
	// Capture both subjects while the records move, under the old limits.
	cfg.Subjects = []string{linkproto.LegacyAnyMeshEvents, linkproto.AnyMeshEvents}
	if st, err = js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("capture the new subjects: %w", err)
	}
	moved, err := s.copyLegacyEvents(ctx, js, st)
	if err != nil {
		return err
	}
	// Purge the old copies only once every new one is there.
	for _, subj := range moved {
		if err := awaitStored(ctx, st, subj); err != nil {
			return fmt.Errorf("the moved record %s: %w", subj, err)
		}
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(linkproto.LegacyAnyMeshEvents)); err != nil {
		return fmt.Errorf("purge the old subjects: %w", err)
	}
	s.Log.Info("moved the events stream's records to one subject each", "records", len(moved))
	return nil
}

// copyLegacyEvents publishes each record on a legacy subject again on its
// own subject, and returns those subjects. A copy carries the header
// Nats-Expected-Last-Subject-Sequence: 0, so the stream refuses it when
// the subject holds the record already (a move run before, or the node
// sending it anew).
func (s *Service) copyLegacyEvents(ctx context.Context, js jetstream.JetStream, st jetstream.Stream) ([]string, error) {
	last, err := st.GetLastMsgForSubject(ctx, linkproto.LegacyAnyMeshEvents)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := store.NewPuller(ctx, st, jetstream.ConsumerConfig{FilterSubject: linkproto.LegacyAnyMeshEvents})
	if err != nil {
		return nil, err
	}
	defer p.Close(ctx)
	nc := js.Conn()
	var moved []string
	var pubErr error
	_, err = p.Drain(ctx, moveBatch, dialTimeout, func(m jetstream.Msg, md *jetstream.MsgMetadata) bool {
		more := md.Sequence.Stream < last.Sequence
		mesh, node, err := linkproto.NodeOf(m.Subject())
		seq, serr := legacySeq(m)
		if err != nil || serr != nil {
			s.Log.Warn("not moving an events message that is no record", "subject", m.Subject(), "stream_seq", md.Sequence.Stream, "err", errors.Join(err, serr))
			return more
		}
		c := &nats.Msg{Subject: linkproto.EventSubject(mesh, node, seq), Header: nats.Header{}, Data: m.Data()}
		c.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		// The stream sends no acknowledgements (NoAck); what was
		// stored is checked before the old copies go.
		if pubErr = nc.PublishMsg(c); pubErr != nil {
			return false
		}
		moved = append(moved, c.Subject)
		return more
	})
	if err = errors.Join(err, pubErr); err != nil {
		return nil, err
	}
	return moved, nc.FlushTimeout(dialTimeout)
}

// awaitStored waits until the stream holds a message on subj. A flush
// says the broker has a publication, not that the stream has stored it:
// the stream takes it from a queue of its own a moment later.
func awaitStored(ctx context.Context, st jetstream.Stream, subj string) error {
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		_, err := st.GetLastMsgForSubject(ctx, subj)
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// legacySeq is the sequence of a legacy events message: its header and its
// body must agree, or which record it is is not known.
func legacySeq(m jetstream.Msg) (uint64, error) {
	h, err := strconv.ParseUint(m.Headers().Get(legacySeqHeader), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("header %s: %w", legacySeqHeader, err)
	}
	var r event.Record
	if err := json.Unmarshal(m.Data(), &r); err != nil {
		return 0, err
	}
	if r.Seq != h || h == 0 {
		return 0, fmt.Errorf("the body says record %d, the header %d", r.Seq, h)
	}
	return h, nil
}
