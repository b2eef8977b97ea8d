package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Retry of the events publisher after a failed publish while the link stays
// up (the stream missing, or refusing): from eventsRetryMin, doubling to
// eventsRetryMax.
const (
	eventsRetryMin = time.Second
	eventsRetryMax = 60 * time.Second
)

// publishEvents sends the journal upward from the acknowledged mark on,
// following it as it grows, until ctx ends. A failed publish voids the
// ones in flight; it starts over from the mark after a pause, and
// JetStream's deduplication swallows what is sent twice.
func (l *Link) publishEvents(ctx context.Context, js jetstream.JetStream) {
	for attempt := 0; ; attempt++ {
		before := l.acked.Load()
		err := l.publishFrom(ctx, js, before+1)
		if ctx.Err() != nil {
			return
		}
		if l.acked.Load() > before {
			attempt = 0
		}
		wait := backoff(attempt, eventsRetryMin, eventsRetryMax)
		l.log.Warn("events: publish failed; starting over from the acknowledged mark", "acked", l.acked.Load(), "retry_in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// inFlight is one published record awaiting its acknowledgement.
type inFlight struct {
	seq uint64
	f   jetstream.PubAckFuture
}

// publishFrom publishes records from seq from on, in order, at most
// maxInFlight unacknowledged, until ctx ends or a publish fails.
func (l *Link) publishFrom(ctx context.Context, js jetstream.JetStream, from uint64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pending := make(chan inFlight, maxInFlight)
	slots := make(chan struct{}, maxInFlight)
	acksDone := make(chan struct{})
	go func() {
		defer close(acksDone)
		cancel(l.collectAcks(ctx, pending, slots))
	}()
	subj := linkproto.EventsSubject(l.cfg.Mesh, l.cfg.Node)
	err := l.j.Follow(ctx, from, func(r event.Record) error {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		msg := &nats.Msg{Subject: subj, Header: nats.Header{}, Data: eventBody(r)}
		msg.Header.Set(linkproto.HeaderSeq, strconv.FormatUint(r.Seq, 10))
		f, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(linkproto.MsgID(l.cfg.Mesh, l.cfg.Node, r.Seq)))
		if err != nil {
			return fmt.Errorf("publish record %d: %w", r.Seq, err)
		}
		pending <- inFlight{seq: r.Seq, f: f} // never blocks: a slot was taken
		return nil
	})
	if errors.Is(err, journal.ErrClosed) {
		err = context.Canceled
	}
	cancel(err)
	<-acksDone
	return context.Cause(ctx)
}

// collectAcks waits for the acknowledgements in publish order, so acked
// moves over a contiguous prefix only, and persists the mark in batches.
// It returns the first publish error, or nil when ctx ends; it persists the
// mark before it returns.
func (l *Link) collectAcks(ctx context.Context, pending <-chan inFlight, slots <-chan struct{}) error {
	defer l.mark()
	var (
		cur    *inFlight
		ok     <-chan *jetstream.PubAck
		failed <-chan error
		tick   *time.Timer
		tickC  <-chan time.Time
	)
	defer func() {
		if tick != nil {
			tick.Stop()
		}
	}()
	for {
		next := pending
		if cur != nil {
			next = nil
		}
		select {
		case p := <-next:
			cur = &p
			ok, failed = p.f.Ok(), p.f.Err()
		case <-ok:
			l.acked.Store(cur.seq)
			cur, ok, failed = nil, nil, nil
			<-slots
			switch {
			case l.acked.Load()-l.marked.Load() >= markAfter:
				l.mark()
			case tickC == nil:
				if tick == nil {
					tick = time.NewTimer(markEvery)
				} else {
					tick.Reset(markEvery)
				}
				tickC = tick.C
			}
		case err := <-failed:
			return fmt.Errorf("record %d: %w", cur.seq, err)
		case <-tickC:
			tickC = nil
			l.mark()
		case <-ctx.Done():
			return nil
		}
	}
}

// mark persists the acknowledged mark if it moved.
func (l *Link) mark() {
	a := l.acked.Load()
	if a <= l.marked.Load() {
		return
	}
	if err := l.j.MarkAcked(a); err != nil {
		if !errors.Is(err, journal.ErrClosed) {
			l.log.Error("record the acknowledged mark", "acked", a, "err", err)
		}
		return
	}
	l.marked.Store(a)
}

// eventBody encodes r for the events stream. A record whose stored payload
// is not JSON (damage the projection counts as undecodable) still goes up,
// with its payload replaced by a note, so one bad record cannot stall the
// stream behind it.
func eventBody(r event.Record) []byte {
	b, err := linkproto.EventBody(r)
	if err == nil {
		return b
	}
	r.Payload, _ = json.Marshal(linkproto.Omitted{Omitted: "payload does not encode: " + err.Error(), Bytes: len(r.Payload)})
	b, err = linkproto.EventBody(r)
	if err != nil {
		panic("link: record does not encode: " + err.Error())
	}
	return b
}
