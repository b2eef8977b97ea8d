package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Puller reads a stream in batches through one ephemeral pull consumer.
//
// Not nats.go's ordered consumer: its every Fetch deletes its consumer
// and makes another, so a read of 10,000 nodes' heartbeats made a
// consumer a batch. On a cluster each new consumer is served, at first,
// only by the server that holds it: a fetch sent through another server
// before the consumer's interest reached it found no responders, and
// `meshctl nodes` failed at 1,000 and 10,000 nodes on three servers. Here
// the consumer is made once, a fetch that finds no responders is sent
// again for a while, and a message lost between the server and this
// client (a gap in the consumer's sequence) is an error rather than a node
// or a record silently left out.
type Puller struct {
	stream jetstream.Stream
	cons   jetstream.Consumer
	last   uint64 // the consumer sequence of the last message handed out
}

// pullerPatience bounds how long a fetch is sent again while it finds no
// responders.
const pullerPatience = 5 * time.Second

// NewPuller makes the consumer of stream cfg says: one that acknowledges
// nothing, kept in memory, deleted when Close is called or when unused a
// while.
func NewPuller(ctx context.Context, stream jetstream.Stream, cfg jetstream.ConsumerConfig) (*Puller, error) {
	cfg.AckPolicy = jetstream.AckNonePolicy
	cfg.MemoryStorage, cfg.Replicas = true, 1
	if cfg.InactiveThreshold == 0 {
		// Deleted when done; this is for a reader killed before that.
		cfg.InactiveThreshold = 30 * time.Second
	}
	cons, err := stream.CreateConsumer(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &Puller{stream: stream, cons: cons}, nil
}

// pending is how many messages the consumer had to deliver when made.
func (p *Puller) pending() uint64 { return p.cons.CachedInfo().NumPending }

// Pending is how many messages the consumer had to deliver when made: a
// reader bounded by a count can tell, before reading, that there are more.
func (p *Puller) Pending() uint64 { return p.pending() }

// Close deletes the consumer.
func (p *Puller) Close(ctx context.Context) {
	_ = p.stream.DeleteConsumer(context.WithoutCancel(ctx), p.cons.CachedInfo().Name)
}

// Drain hands fn each message the consumer has to deliver, in order, each
// fetch asking for at most batch and never for more than the consumer has
// pending: a fetch for more waits out its whole wait for messages that
// are not there, and `meshctl journal` of any node took 5 s. It ends when
// nothing is pending, when fn returns false (the rest of a batch already
// on its way is dropped), or when a fetch brings none within wait:
// stalled is then how many the consumer still counted pending.
func (p *Puller) Drain(ctx context.Context, batch int, wait time.Duration, fn func(jetstream.Msg, *jetstream.MsgMetadata) bool) (stalled uint64, err error) {
	more := true
	for pending := p.pending(); pending > 0 && more; {
		handed, err := p.each(ctx, int(min(pending, uint64(batch))), wait, func(m jetstream.Msg, md *jetstream.MsgMetadata) {
			pending = md.NumPending
			if more {
				more = fn(m, md)
			}
		})
		if err != nil {
			return 0, err
		}
		if handed == 0 {
			return pending, nil
		}
	}
	return 0, nil
}

// Next returns up to n messages, waiting at most wait for the first; none
// when there were none in that time.
func (p *Puller) Next(ctx context.Context, n int, wait time.Duration) ([]jetstream.Msg, error) {
	var msgs []jetstream.Msg
	_, err := p.each(ctx, n, wait, func(m jetstream.Msg, _ *jetstream.MsgMetadata) { msgs = append(msgs, m) })
	return msgs, err
}

// each is next handing fn each message as it arrives, and returning how
// many it handed, with its metadata: a reader that passes them on to be decoded elsewhere
// has the batch decoded while the rest of it is on its way.
func (p *Puller) each(ctx context.Context, n int, wait time.Duration, fn func(jetstream.Msg, *jetstream.MsgMetadata)) (int, error) {
	deadline := time.Now().Add(pullerPatience)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		handed, err := p.fetch(n, wait, fn)
		if !errors.Is(err, nats.ErrNoResponders) || handed > 0 {
			return handed, err
		}
		if time.Now().Add(pause).After(deadline) {
			return 0, fmt.Errorf("consumer %s: %w (for %s)", p.cons.CachedInfo().Name, err, pullerPatience)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(pause):
		}
	}
}

func (p *Puller) fetch(n int, wait time.Duration, fn func(jetstream.Msg, *jetstream.MsgMetadata)) (int, error) {
	batch, err := p.cons.Fetch(n, jetstream.FetchMaxWait(wait))
	if err != nil {
		return 0, err
	}
	handed := 0
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return handed, err
		}
		if md.Sequence.Consumer != p.last+1 {
			return handed, fmt.Errorf("consumer %s: message %d arrived after %d: messages were lost on the way; try again", p.cons.CachedInfo().Name, md.Sequence.Consumer, p.last)
		}
		p.last = md.Sequence.Consumer
		handed++
		fn(m, md)
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return handed, err
	}
	return handed, nil
}
