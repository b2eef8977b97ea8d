package nodeservice

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/linkproto"
)

// Answering nodes' requests. A subscription's callback runs one message
// at a time, and answering a hello or a sync waits on JetStream (a message
// or two read, a key looked up): answered one by one, 10,000 nodes' hellos
// waited longer than the nodes do (5 s), every node said hello again, and
// the service answered each late hello all the same, at a core's worth of
// CPU for nothing. Requests are answered by a pool of workers; one that
// waited past when its node stopped waiting is dropped unanswered, as is
// one that finds the queue full: the node asks again, later.
const (
	// answerWorkers answer one kind of request at once.
	answerWorkers = 32
	// answerQueue is how many requests of one kind wait at most.
	answerQueue = 4096
)

// answerer answers the requests on one subject.
type answerer struct {
	what    string
	stale   time.Duration // a request older than this is not answered
	answer  func(*nats.Msg)
	queue   chan queued
	dropped atomic.Int64
}

type queued struct {
	m  *nats.Msg
	at time.Time
}

// answer subscribes to subject in the control queue group and answers
// its requests with fn, answerWorkers at a time, until ctx ends. A request
// that waited stale is dropped.
func answer(ctx context.Context, nc *nats.Conn, log *slog.Logger, what, subject string, stale time.Duration, fn func(*nats.Msg)) (*nats.Subscription, error) {
	a := &answerer{what: what, stale: stale, answer: fn, queue: make(chan queued, answerQueue)}
	sub, err := nc.QueueSubscribe(subject, linkproto.ControlQueue, func(m *nats.Msg) {
		select {
		case a.queue <- queued{m, time.Now()}:
		default:
			a.drop(log)
		}
	})
	if err != nil {
		return nil, err
	}
	for range answerWorkers {
		go a.work(ctx, log)
	}
	return sub, nil
}

func (a *answerer) work(ctx context.Context, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case q := <-a.queue:
			if time.Since(q.at) > a.stale {
				a.drop(log)
				continue
			}
			a.answer(q.m)
		}
	}
}

// drop counts a request left unanswered, and says so at the first and at
// every thousandth.
func (a *answerer) drop(log *slog.Logger) {
	if n := a.dropped.Add(1); n == 1 || n%1000 == 0 {
		log.Warn("too busy: requests left unanswered (their nodes ask again)", "requests", a.what, "dropped", n)
	}
}
