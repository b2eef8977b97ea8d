package fleetmetrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The labels of mesh_node_declarations_total.
const (
	outcomeReceived  = "received"
	outcomeReapplied = "reapplied"
	outcomeRefused   = "refused"

	viaPush  = "push"  // the node took it from a push (source link:pushed)
	viaLink  = "link"  // from the link otherwise: a hello's welcome, a sync
	viaFile  = "file"  // mesh-host apply FILE on the machine
	viaOther = "other" // anything else a node says
)

// followBytes bounds what the events consumer holds fetched and not yet
// counted: records are up to linkproto.MaxEventSize each, and a pull of
// the default 500 of them would be hundreds of megabytes.
const followBytes = 8 << 20

// Run counts the declaration records the nodes journal
// (mesh_node_declarations_total) until ctx ends: an actor of the control
// service's run group. It follows the events stream through an ordered
// consumer from the time New was called (a consumer that starts later, as
// the node service makes the stream, misses nothing since), so it sees
// each record once, as the stream stores it: the stream keeps one message
// per record's subject and refuses a node's resends, so no record is
// counted twice and a node cannot replay another's.
// Until the stream is there (the node service makes it) it waits.
func (m *Metrics) Run(ctx context.Context) error {
	if m.cfg.Conn == nil {
		<-ctx.Done()
		return nil
	}
	for {
		err := m.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		wait := 2 * time.Second
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			m.cfg.Log.Warn("metrics: following the nodes' records; starting again", "err", err, "in", wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// follow counts the records of the events stream stored from now on,
// until ctx ends or the consumer fails.
func (m *Metrics) follow(ctx context.Context) error {
	js, err := jetstream.New(m.cfg.Conn)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		return err
	}
	// From where the last consumer stopped, or from when the metrics
	// began: the stream may come to be after that (a new mesh), and a
	// consumer made again must not count a record twice.
	from := jetstream.OrderedConsumerConfig{FilterSubjects: []string{linkproto.NodeEvents(m.cfg.Mesh, "*")}}
	if seq := m.followed.Load(); seq > 0 {
		from.DeliverPolicy, from.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	} else {
		since := m.since
		from.DeliverPolicy, from.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := s.OrderedConsumer(ctx, from)
	if err != nil {
		return err
	}
	// The ordered consumer makes itself again after a gap or a lost
	// connection, from the next record it has not delivered.
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		m.countRecord(msg.Subject(), msg.Data())
		if md, err := msg.Metadata(); err == nil {
			m.followed.Store(md.Sequence.Stream)
		}
	}, jetstream.PullMaxBytes(followBytes))
	if err != nil {
		return err
	}
	defer cc.Stop()
	select {
	case <-ctx.Done():
		return nil
	case <-cc.Closed():
		return errors.New("the events consumer closed")
	}
}

// countRecord counts one stored record if it is a declaration's: a node
// wrote it, so nothing of it is trusted but the subject the broker let
// only that node publish on. Most records are not a declaration's, and are
// let go without being decoded.
func (m *Metrics) countRecord(subject string, body []byte) {
	// json.Marshal writes the envelope's kind so; a record written
	// otherwise is not one the host made, and is not counted.
	if !bytes.Contains(body, []byte(`"kind":"declaration.`)) {
		return
	}
	mesh, _, seq, err := linkproto.ParseEventSubject(subject)
	if err != nil || mesh != m.cfg.Mesh {
		return
	}
	var r struct {
		Seq     uint64     `json:"seq"`
		Kind    event.Kind `json:"kind"`
		Payload struct {
			Source string `json:"source"`
		} `json:"payload"`
	}
	if json.Unmarshal(body, &r) != nil || r.Seq != seq {
		return // the body names another record than its subject: the node misbehaving
	}
	var outcome string
	switch r.Kind {
	case event.DeclarationReceived:
		outcome = outcomeReceived
	case event.DeclarationReapplied:
		outcome = outcomeReapplied
	case event.DeclarationRefused:
		outcome = outcomeRefused
	default:
		return
	}
	m.declarations.WithLabelValues(outcome, viaOf(r.Payload.Source)).Inc()
}

// viaOf names where a declaration came from, from a record's source
// ("link:pushed", "link:reconnect", "file:/srv/x.yaml"): one of four
// labels, never the node's text.
func viaOf(source string) string {
	switch {
	case source == "link:"+string(event.TriggerPushed):
		return viaPush
	case strings.HasPrefix(source, "link:"):
		return viaLink
	case strings.HasPrefix(source, "file:"):
		return viaFile
	}
	return viaOther
}
