package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Timings of the events publisher. A sync asks the control plane how much
// of the journal the events stream holds; the stream sends no
// acknowledgements of its own (linkproto's syncToken says why).
const (
	// syncEvery is how often the publisher asks while many records are
	// sent and not yet known to be held (syncBurst or more).
	syncEvery = 50 * time.Millisecond
	// syncSettle is how long it waits to ask about fewer: a push's
	// records (received, started, its outcomes) are journaled within
	// milliseconds of each other, and one question after them all costs
	// the host and the control service a third of one after each. Nothing
	// waits on the answer but the acknowledged mark.
	syncSettle = 500 * time.Millisecond
	syncBurst  = maxInFlight / 8
	// syncTimeout bounds one sync's wait for an answer.
	syncTimeout = 2 * time.Second
	// stallAfter: when the stream says it holds less than was sent, and
	// nothing moved for this long on an answering control plane, the rest
	// was lost on the way (the stream refused it, or is missing): send it
	// again from where the stream stops.
	stallAfter = 5 * time.Second
	// eventsRetryMin and eventsRetryMax bound the pause before sending
	// again after a stall.
	eventsRetryMin = time.Second
	eventsRetryMax = 60 * time.Second
)

// errStalled ends a round of publishing that the stream stopped taking.
var errStalled = errors.New("the events stream holds less than was sent, and it stopped moving")

// publishEvents sends the journal upward from the acknowledged mark on,
// following it as it grows, until ctx ends. A round that stalls starts over
// from the mark after a pause; the stream refuses what is sent twice (it
// keeps one message per record subject).
func (l *Link) publishEvents(ctx context.Context, nc *nats.Conn) {
	for attempt := 0; ; attempt++ {
		if err := l.startFromStream(ctx, nc); err != nil {
			return // ctx ended
		}
		before := l.acked.Load()
		err := l.publishFrom(ctx, nc, before+1)
		if ctx.Err() != nil {
			return
		}
		if l.acked.Load() > before {
			attempt = 0
		}
		wait := backoff(attempt, eventsRetryMin, eventsRetryMax)
		l.log.Warn("events: starting over from the acknowledged mark", "acked", l.acked.Load(), "retry_in", wait.Round(time.Millisecond), "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// startFromStream waits until a control plane says how much of the journal
// the stream holds, and moves the acknowledged mark up to it. Sending
// before knowing would send again what the stream may hold already: it
// refuses those, but the round would stall on them; the journal keeps the
// records meanwhile. It returns an error only when ctx
// ends.
func (l *Link) startFromStream(ctx context.Context, nc *nats.Conn) error {
	for attempt := 0; ; attempt++ {
		through, err := l.sync(ctx, nc, l.acked.Load())
		if err == nil {
			info, ierr := l.j.Info()
			switch {
			case ierr != nil:
				l.log.Error("read the journal", "err", ierr)
			case through > info.Head:
				// The stream holds more of this node than its journal
				// has: the state directory was replaced. Nothing to skip.
				l.log.Warn("the events stream holds records beyond this journal's head; was the state directory replaced?",
					"events_through", through, "head", info.Head)
			case through > l.acked.Load():
				l.ackThrough(through)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.log.Debug("events: waiting for a control plane to say what the stream holds", "err", err)
		t := time.NewTimer(backoff(attempt, syncEvery, eventsRetryMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// publishFrom publishes records from seq from on, in order, on the one
// connection (so the stream stores them in that order), at most
// maxInFlight beyond what the stream is known to hold, until ctx ends or
// the round stalls. Publishing carries no reply subject: nothing the
// server sends in answer could be aimed anywhere.
func (l *Link) publishFrom(ctx context.Context, nc *nats.Conn, from uint64) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var sent atomic.Uint64
	sent.Store(from - 1)
	moved := make(chan struct{}, 1) // the acknowledged mark moved
	wake := make(chan struct{}, 1)  // something was sent
	syncDone := make(chan struct{})
	go func() {
		defer close(syncDone)
		cancel(l.syncAcks(ctx, nc, &sent, wake, moved))
	}()
	err := l.j.Follow(ctx, from, func(r event.Record) error {
		for r.Seq > l.acked.Load()+maxInFlight {
			select {
			case <-moved:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// The subject names the record; the stream refuses a second
		// message on it.
		if err := nc.Publish(linkproto.EventSubject(l.cfg.Mesh, l.cfg.Node, r.Seq), eventBody(l.withDocument(r))); err != nil {
			return fmt.Errorf("publish record %d: %w", r.Seq, err)
		}
		sent.Store(r.Seq)
		select {
		case wake <- struct{}{}:
		default:
		}
		return nil
	})
	if errors.Is(err, journal.ErrClosed) {
		err = context.Canceled
	}
	cancel(err)
	<-syncDone
	return context.Cause(ctx)
}

// syncAcks asks the control plane how much the stream holds while records
// are sent and not known to be held, moves the acknowledged mark over what
// it holds, and persists the mark in batches. It returns errStalled when
// the stream holds less than was sent and stops moving; nil when ctx ends.
// A control plane that does not answer is waited for: the records are in
// the stream or on the way, and a new connection starts over anyway.
func (l *Link) syncAcks(ctx context.Context, nc *nats.Conn, sent *atomic.Uint64, wake <-chan struct{}, moved chan<- struct{}) error {
	defer l.mark()
	// The mark is persisted MarkEvery after it first moved past what is
	// persisted, not as it moves, unless an append carried it first
	// (ackThrough): a push's few records are acknowledged in two or three
	// steps, and a commit each, fsync'd, on the path of the apply cost as
	// much as the apply's own. A mark lost to a crash sends those records
	// again, which the stream keeps once.
	persist := time.NewTimer(l.cfg.MarkEvery)
	persist.Stop()
	defer persist.Stop()
	armed := false
	arm := func() {
		if !armed && l.acked.Load() > l.marked.Load() {
			persist.Reset(l.cfg.MarkEvery)
			armed = true
		}
	}
	lastMove := time.Now()
	idle := 0
	for {
		if sent.Load() <= l.acked.Load() {
			arm() // caught up: persist soon, then wait for more
			lastMove = time.Now()
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			case <-persist.C:
				armed = false
				l.mark()
			}
			continue
		}
		wait := syncEvery
		if sent.Load()-l.acked.Load() < syncBurst {
			wait = syncSettle
		}
		if idle > 0 {
			wait = backoff(idle-1, syncEvery, syncTimeout)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-persist.C:
			t.Stop()
			armed = false
			l.mark()
			continue
		case <-t.C:
		}
		through, err := l.sync(ctx, nc, sent.Load())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			idle++
			l.log.Debug("events: no answer to a sync", "err", err)
			continue
		}
		idle = 0
		// What this connection sent, the stream holds up to through; a
		// through beyond sent is from before (the records are the same).
		through = min(through, sent.Load())
		if through > l.acked.Load() {
			l.ackThrough(through)
			lastMove = time.Now()
			select {
			case moved <- struct{}{}:
			default:
			}
			if l.acked.Load()-l.marked.Load() >= markAfter {
				l.mark()
			}
			arm()
			continue
		}
		if time.Since(lastMove) > stallAfter {
			return fmt.Errorf("%w: it holds through %d of %d sent", errStalled, l.acked.Load(), sent.Load())
		}
	}
}

// sync asks the control plane how much of the journal the stream holds.
func (l *Link) sync(ctx context.Context, nc *nats.Conn, sent uint64) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	nonce := linkproto.NewNonce()
	q := linkproto.Marshal(linkproto.Sync{Protocol: linkproto.ProtocolVersion, Node: l.cfg.Node, Sent: sent, Nonce: nonce})
	m, err := nc.RequestWithContext(ctx, linkproto.SyncSubject(l.cfg.Mesh, l.cfg.Node), q)
	if err != nil {
		return 0, err
	}
	var s linkproto.Synced
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &s); err != nil {
		l.refuse(linkproto.SyncSubject(l.cfg.Mesh, l.cfg.Node), "synced: "+err.Error(), len(m.Data))
		return 0, err
	}
	if err := s.Verify(l.cfg.Trust, l.cfg.Mesh, l.cfg.Node, nonce); err != nil {
		l.refuse(linkproto.SyncSubject(l.cfg.Mesh, l.cfg.Node), "synced: "+err.Error(), len(m.Data))
		return 0, err
	}
	return s.EventsThrough, nil
}

// ackThrough moves the acknowledged mark to seq, and notes it for the
// journal's next append to record; mark persists it when none comes.
func (l *Link) ackThrough(seq uint64) {
	l.acked.Store(seq)
	l.j.NoteAcked(seq)
}

// mark persists the acknowledged mark with a commit of its own, unless the
// journal holds it already (an append carried it).
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

// withDocument returns r as it goes upward: a declaration.received whose
// document the journal stores apart carries it again, as records did
// before documents were (linkproto.EventBody drops it again from a record
// too large to send). The control plane has no journal to look it up in,
// and `meshctl replay` needs it. A document the journal cannot give is
// left out: the record still goes, naming it.
func (l *Link) withDocument(r event.Record) event.Record {
	if r.Kind != event.DeclarationReceived {
		return r
	}
	var p event.DeclarationReceivedPayload
	if json.Unmarshal(r.Payload, &p) != nil || len(p.Document) > 0 {
		return r
	}
	sum, ok := journal.ParseSum(p.DocumentSHA256)
	if !ok {
		return r
	}
	doc, err := l.j.Document(sum)
	if err != nil {
		l.log.Error("read the document of a declaration to send upward", "seq", r.Seq, "err", err)
		return r
	}
	p.Document = doc
	b, err := json.Marshal(p)
	if err != nil {
		return r
	}
	r.Payload = b
	return r
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
