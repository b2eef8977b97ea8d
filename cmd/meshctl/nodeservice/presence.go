package nodeservice

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The system account's events of the mesh account's connections, as
// nats-server publishes them (server/events.go): ACCOUNT is the account's
// public key.
const (
	connectEventSubject    = "$SYS.ACCOUNT.%s.CONNECT"
	disconnectEventSubject = "$SYS.ACCOUNT.%s.DISCONNECT"
)

// maxConnEvent bounds an event decoded: one carries the client's JWT, a
// kilobyte or two; anything larger is not the broker's.
const maxConnEvent = 64 << 10

// presenceQueue is how many events wait to be recorded; more are dropped
// (and logged): a broker restarting closes every node's connection at
// once, and a record lost costs a state that heartbeats give later.
const presenceQueue = 4096

// Presence records what the broker says of the nodes' connections: as the
// system user, it takes the system account's connect and disconnect events
// for the mesh's account, and records each that is a node's, by the user
// key its credential is for, in the presence bucket. `meshctl nodes` then
// shows a node whose connection closed disconnected within a second,
// rather than silent three heartbeat intervals later.
//
// Several control services serving one cluster each record every event:
// store.Presences.Record stores each once. Without the system account
// (an existing cluster that does not give it), nothing is recorded and
// the states are the heartbeats' alone.
type Presence struct {
	// Sys is the system user's connection; Conn the control user's, for
	// the buckets.
	Sys, Conn *nats.Conn
	Mesh      string
	// Account is the mesh account's public key.
	Account string
	Log     *slog.Logger
}

// connEvent is what is read of a connect or disconnect event.
type connEvent struct {
	Time   time.Time `json:"timestamp"`
	Server struct {
		Name string `json:"name"`
		ID   string `json:"id"`
	} `json:"server"`
	Client struct {
		Start   *time.Time `json:"start"`
		ID      uint64     `json:"id"`
		Account string     `json:"acc"`
		User    string     `json:"user"`
		// JWT is the user JWT the connection presented, which the
		// broker checked: a node's names the node.
		JWT string `json:"jwt"`
	} `json:"client"`
	Reason string `json:"reason"`
}

type heard struct {
	connected bool
	data      []byte
}

// Run records events until ctx ends.
func (p *Presence) Run(ctx context.Context) error {
	events := make(chan heard, presenceQueue)
	for _, e := range []struct {
		subject   string
		connected bool
	}{{connectEventSubject, true}, {disconnectEventSubject, false}} {
		sub, err := p.Sys.Subscribe(fmt.Sprintf(e.subject, p.Account), func(m *nats.Msg) {
			select {
			case events <- heard{e.connected, m.Data}:
			default:
				p.Log.Warn("presence: too many connection events at once; one dropped (the heartbeats will tell)")
			}
		})
		if err != nil {
			// Not the service's end: presence is a help, and nodes are
			// answered without it.
			p.Log.Warn("presence: the broker's connection events cannot be had; nodes' states come from their heartbeats alone", "err", err)
			<-ctx.Done()
			return nil
		}
		defer sub.Unsubscribe()
	}
	js, err := jetstream.New(p.Conn)
	if err != nil {
		return err
	}
	st := store.New(js)
	var presences *store.Presences
	var nodes jetstream.KeyValue
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-events:
			if presences == nil {
				// The buckets are made by the service beside this one as
				// it starts: an event before then waits for them.
				if presences, nodes, err = p.buckets(ctx, st); err != nil {
					return nil // ctx ended
				}
			}
			p.record(ctx, presences, nodes, e)
		}
	}
}

// buckets waits for the presence and nodes buckets until ctx ends.
func (p *Presence) buckets(ctx context.Context, st *store.Store) (*store.Presences, jetstream.KeyValue, error) {
	for {
		ps, err := st.Presences(ctx, p.Mesh)
		if err == nil {
			var nodes jetstream.KeyValue
			if nodes, err = st.KV(ctx, linkproto.NodesBucket); err == nil {
				return ps, nodes, nil
			}
		}
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, ctx.Err()
		case <-t.C:
		}
	}
}

// record records e if it is an event of a node's own connection.
func (p *Presence) record(ctx context.Context, presences *store.Presences, nodes jetstream.KeyValue, e heard) {
	rec, err := p.presenceOf(ctx, nodes, e)
	if err != nil {
		p.Log.Debug("presence: event not recorded", "err", err)
		return
	}
	if rec == nil {
		return
	}
	stored, err := presences.Record(ctx, *rec)
	if err != nil {
		p.Log.Warn("presence: record", "node", rec.Node, "err", err)
		return
	}
	p.Log.Debug("presence", "node", rec.Node, "connected", rec.Connected, "reason", rec.Reason, "recorded", stored)
}

// presenceOf is the record e makes: nil for a connection that is not a
// node's own (the control services', an enrolment's). Only the
// credential's key identifies a node: the name a connection gives is the
// client's to choose, and the name its user JWT carries (which the mesh
// signed) is believed only for the key the credential of that name is
// for, so an enrolment's bearer user or a replaced key is not the node.
func (p *Presence) presenceOf(ctx context.Context, nodes jetstream.KeyValue, e heard) (*store.Presence, error) {
	if len(e.data) > maxConnEvent {
		return nil, fmt.Errorf("an event of %d bytes", len(e.data))
	}
	var ev connEvent
	if err := json.Unmarshal(e.data, &ev); err != nil {
		return nil, fmt.Errorf("an event that does not decode: %w", err)
	}
	c := ev.Client
	if c.Account != p.Account || c.User == "" || c.JWT == "" {
		return nil, nil
	}
	if ev.Time.IsZero() {
		return nil, errors.New("an event without a time")
	}
	uc, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil || uc.Subject != c.User || linkproto.ValidName(uc.Name) != nil {
		return nil, nil // not a node's: the control user's, an enrolment's
	}
	node := uc.Name
	cred, _, err := store.Credential(ctx, nodes, p.Mesh, node)
	if err != nil {
		return nil, err
	}
	if cred == nil || cred.Key != c.User {
		return nil, nil
	}
	rec := &store.Presence{
		Node:      node,
		Connected: e.connected,
		At:        ev.Time.UTC(),
		Server:    linkproto.FitPrintable(ev.Server.Name, store.MaxPresenceText),
		Conn:      linkproto.FitPrintable(fmt.Sprintf("%s/%d", ev.Server.ID, c.ID), store.MaxPresenceText),
	}
	if c.Start != nil {
		rec.Since = c.Start.UTC()
	}
	if !e.connected {
		rec.Reason = linkproto.FitPrintable(ev.Reason, store.MaxPresenceText)
	}
	return rec, nil
}
