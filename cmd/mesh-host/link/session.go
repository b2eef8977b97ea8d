package link

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Hello retries while the link is up and nobody answers: from helloRetryMin,
// doubling to helloRetryMax.
const (
	helloRetryMin = time.Second
	helloRetryMax = 60 * time.Second
)

// session is what runs while the link is up: hello, the events publisher
// and the heartbeats. It ends when the link goes down or the host stops.
type session struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the session and waits for it: its last acknowledged mark is
// persisted when stop returns.
func (s *session) stop() {
	s.cancel()
	<-s.done
}

func (l *Link) startSession(ctx context.Context, nc *nats.Conn) *session {
	// The host is stopping when Run's ctx ends; a session stopped alone
	// ends with its connection.
	parent := ctx
	stopping := func() bool { return parent.Err() != nil }
	ctx, cancel := context.WithCancel(ctx)
	s := &session{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		l.runSession(ctx, nc, stopping)
	}()
	return s
}

// runSession says hello, then publishes events and heartbeats until ctx
// ends. The first hello is waited for (up to HelloTimeout), so the events
// start where the stream says it holds them; if nobody answers, they start
// from the journal's acknowledged mark and hello is retried meanwhile, for
// the declaration.
func (l *Link) runSession(ctx context.Context, nc *nats.Conn, stopping func() bool) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if w, err := l.hello(ctx, nc); err == nil {
		l.welcomed(ctx, w, true)
	} else if ctx.Err() == nil {
		l.log.Info("no answer to hello; retrying in the background", "err", err)
		wg.Go(func() { l.helloUntilAnswered(ctx, nc) })
	}
	wg.Go(func() { l.publishEvents(ctx, nc) })
	wg.Go(func() { l.renewals(ctx, nc) })
	l.heartbeats(ctx, nc, stopping)
}

// hello asks the control plane for this node's declaration, once.
func (l *Link) hello(ctx context.Context, nc *nats.Conn) (*linkproto.Welcome, error) {
	h := linkproto.Hello{Protocol: linkproto.ProtocolVersion, Node: l.cfg.Node, Version: l.cfg.Version, Nonce: linkproto.NewNonce()}
	s, err := l.host.State()
	if err != nil {
		return nil, err
	}
	if s.Desired != nil {
		h.Revision = s.Desired.Revision
	}
	h.Local = s.Local != nil
	h.Head = s.Head
	ctx, cancel := context.WithTimeout(ctx, l.cfg.HelloTimeout)
	defer cancel()
	subj := linkproto.HelloSubject(l.cfg.Mesh, l.cfg.Node)
	m, err := nc.RequestWithContext(ctx, subj, linkproto.Marshal(h))
	if err != nil {
		return nil, err
	}
	var w linkproto.Welcome
	if err := linkproto.Decode(m.Data, linkproto.MaxDeclarationSize, &w); err != nil {
		l.refuse(subj, "welcome: "+err.Error(), len(m.Data))
		return nil, err
	}
	// Nothing of a welcome is believed unless the mesh signed it for this
	// hello: its events mark would make the node stop sending records.
	if err := w.Verify(l.cfg.Trust, l.cfg.Mesh, l.cfg.Node, h.Nonce); err != nil {
		l.refuse(subj, "welcome: "+err.Error(), len(m.Data))
		return nil, err
	}
	return &w, nil
}

func (l *Link) helloUntilAnswered(ctx context.Context, nc *nats.Conn) {
	for attempt := 0; ; attempt++ {
		t := time.NewTimer(backoff(attempt, helloRetryMin, helloRetryMax))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		w, err := l.hello(ctx, nc)
		if err == nil {
			l.welcomed(ctx, w, false)
			return
		}
		if ctx.Err() != nil {
			return
		}
		l.log.Debug("no answer to hello", "attempt", attempt+2, "err", err)
	}
}

// welcomed hands the welcome's declaration to the host. The first welcome
// of a session, read before the events start, also moves the acknowledged
// mark up to what the stream holds, so nothing it holds is sent again
// (the stream would refuse it, and the round would stall on it).
func (l *Link) welcomed(ctx context.Context, w *linkproto.Welcome, first bool) {
	if w.Declaration != nil {
		subj := linkproto.HelloSubject(l.cfg.Mesh, l.cfg.Node)
		// The nested declaration gets the checks a push gets.
		data := linkproto.Marshal(w.Declaration)
		d, err := l.decodeDeclaration(data)
		if err != nil {
			l.refuse(subj, "welcome: "+err.Error(), len(data))
		} else {
			ack := l.host.Accept(ctx, d, event.TriggerReconnect)
			l.log.Info("declaration from hello", "revision", d.Revision, "accepted", ack.Accepted, "seq", ack.Seq, "reason", ack.Reason)
		}
	}
	if !first || w.EventsThrough <= l.acked.Load() {
		return
	}
	info, err := l.j.Info()
	if err != nil {
		l.log.Error("read the journal", "err", err)
		return
	}
	if w.EventsThrough > info.Head {
		// The stream holds more of this node than its journal has: the
		// node's state was lost or replaced. The stream refuses this
		// journal's records up to what it holds: their subjects hold the
		// old journal's.
		l.log.Warn("the events stream holds records beyond this journal's head; was the state directory replaced?",
			"events_through", w.EventsThrough, "head", info.Head)
		return
	}
	l.ackThrough(w.EventsThrough)
}

// heartbeats sends one now, one after every completed reconcile, and one
// every HeartbeatInterval while idle, until ctx ends; then, when the host
// is stopping, a last one saying so.
func (l *Link) heartbeats(ctx context.Context, nc *nats.Conn, stopping func() bool) {
	// A reconcile that completed while the link was down is reported by
	// this first heartbeat.
	select {
	case <-l.reconciled:
	default:
	}
	// reported is the digest of the last Report sent on this connection:
	// empty at link up, so that every link up sends one (the states
	// stream keeps only the last, and may have lost it).
	reported := ""
	var last lastState
	l.heartbeat(nc, &reported, &last)
	t := time.NewTimer(l.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if stopping() {
				l.farewell(nc, &reported, &last)
			}
			return
		case <-l.reconciled:
		case <-t.C:
		}
		l.heartbeat(nc, &reported, &last)
		t.Reset(l.cfg.HeartbeatInterval)
	}
}

// lastState is what a heartbeat last read of the host's state. The state
// is a function of the journal: while its head has not moved, it is the
// same, and an idle heartbeat reads the head alone, not the projection of
// every resource the host owns (decoding it and encoding its Report is
// megabytes a heartbeat for a large host).
type lastState struct {
	ok     bool
	head   uint64
	digest string              // the Report's
	hb     linkproto.Heartbeat // its state part
}

// farewell sends the heartbeat of a host that stops on purpose, saying so,
// and waits (up to farewellTimeout) until the broker has it: the
// heartbeats stream then says the node left, before its connection
// closes, and `meshctl nodes` shows it offline at once rather than silent
// three heartbeat intervals later.
func (l *Link) farewell(nc *nats.Conn, reported *string, last *lastState) {
	l.beat(nc, reported, last, stoppingReason)
	if err := nc.FlushTimeout(farewellTimeout); err != nil {
		l.log.Warn("the last heartbeat, saying the host is stopping", "err", err)
	}
}

// heartbeat sends a heartbeat, after the node's Report when the projection
// changed since the last one sent (*reported is its digest).
func (l *Link) heartbeat(nc *nats.Conn, reported *string, last *lastState) {
	l.beat(nc, reported, last, "")
}

// beat is heartbeat, saying the host is stopping when stopping is given.
func (l *Link) beat(nc *nats.Conn, reported *string, last *lastState, stopping string) {
	head, err := l.host.Head()
	if err != nil {
		l.log.Error("heartbeat: read the journal's head", "err", err)
		return
	}
	now := l.cfg.Now()
	// Read again when the state moved, or its Report is still to send.
	if !last.ok || head != last.head || last.digest != *reported {
		s, err := l.host.State()
		if err != nil {
			l.log.Error("heartbeat: read the state", "err", err)
			return
		}
		report := linkproto.ReportOf(l.cfg.Mesh, l.cfg.Node, s, now)
		digest := report.Digest
		if digest != *reported {
			msg := nats.NewMsg(linkproto.StateSubject(l.cfg.Mesh, l.cfg.Node))
			msg.Data = report.Body
			if report.Encoding != "" {
				msg.Header.Set(linkproto.EncodingHeader, report.Encoding)
			}
			err := nc.PublishMsg(msg)
			if err != nil && !errors.Is(err, nats.ErrReconnectBufExceeded) {
				l.log.Warn("report the state", "err", err)
			} else if err == nil {
				*reported = digest
			}
		}
		*last = lastState{ok: true, head: s.Head, digest: digest, hb: linkproto.HeartbeatOf(s)}
	}
	h := last.hb
	h.Report = *reported
	h.Mesh, h.Node, h.Version, h.Build = l.cfg.Mesh, l.cfg.Node, l.cfg.Version, l.cfg.Build
	h.Sent = now.UTC()
	h.Interval = linkproto.Duration(l.cfg.HeartbeatInterval)
	h.Uptime = linkproto.Duration(now.Sub(l.started).Round(time.Second))
	h.Acked = l.acked.Load()
	h.Stopping = stopping
	err = nc.Publish(linkproto.HeartbeatSubject(l.cfg.Mesh, l.cfg.Node), linkproto.Marshal(h))
	if err != nil && !errors.Is(err, nats.ErrReconnectBufExceeded) {
		l.log.Warn("heartbeat", "err", err)
	}
}
