package nodeservice

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Service is the control service of one mesh: it keeps the streams and the
// desired-state bucket in place and answers every node's Hello with a
// Welcome. It holds nothing another Service needs: any number may run
// against one cluster, and the hello queue group answers each hello once.
type Service struct {
	// Conn is a connection as the control user.
	Conn *nats.Conn
	// Mesh is the mesh whose hellos it answers.
	Mesh string
	// Key signs every welcome and synced (the authority's declaration
	// key): a node acts on neither unless it verifies.
	Key nkeys.KeyPair
	// Log receives what the service does and the malformed hellos it
	// drops.
	Log *slog.Logger
	// EventsMaxAge is how long the events stream keeps a record; zero
	// keeps every record. Every service of a cluster should agree: the
	// last to start sets it.
	EventsMaxAge time.Duration
	// Issuer signs the credentials of enrolling and renewing nodes and
	// revokes a node's previous key; nil answers neither.
	Issuer CredentialIssuer
	// CredentialTTL is how long the credentials it signs are valid;
	// 30 days when zero.
	CredentialTTL time.Duration
	// Now is the clock tokens' expiry is judged by; time.Now when nil.
	Now func() time.Time
	// Ready, when set, is called once every subscription is in place at
	// the broker: whoever started Run (a test, a script's mesh) knows from
	// then on that an enrolment or a hello is answered, not met by "no
	// responders".
	Ready func()
	// Enrolled, when set, is told the outcome of every enrolment token
	// presented (redeemed, or refused): what the control service's
	// metrics count. It must not block.
	Enrolled func(accepted bool)
	// RetryEvery is how long to wait after failing to set up the streams
	// (the broker not reachable yet) before trying again; zero means 2 s.
	RetryEvery time.Duration
}

// dialTimeout bounds one connection attempt and each JetStream call the
// service makes for a hello.
const dialTimeout = 5 * time.Second

// Dial connects to urls as the control user for a long-running
// service: it keeps trying until the broker is there, and reconnects
// forever. The broker must prove itself as Dial says.
//
// With local, the broker embedded in this process, it connects in
// process instead: through a pipe, without TCP or TLS, still
// authenticated by the control user's credentials. Every push, answer
// and heartbeat the service sends or hears crosses this connection, and
// over loopback TLS each was encrypted, written, read and decrypted on
// both sides of one process.
func Dial(a *authority.Authority, urls []string, log *slog.Logger, local nats.InProcessConnProvider) (*nats.Conn, error) {
	if len(urls) == 0 {
		return nil, fmt.Errorf("%w to connect to", ErrNoBroker)
	}
	opts := []nats.Option{
		nats.UserCredentials(a.ControlCreds()),
		nats.Name("meshctl serve"),
		nats.Timeout(dialTimeout),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ConnectHandler(func(nc *nats.Conn) { log.Info("connected to the broker", "url", nc.ConnectedUrlRedacted()) }),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			// Closing the connection on the way out disconnects it too.
			if !nc.IsClosed() {
				log.Warn("disconnected from the broker", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("reconnected to the broker", "url", nc.ConnectedUrlRedacted()) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Error("broker error", "err", err) }),
	}
	if local != nil {
		// A tls:// address would have nats.go start TLS over the pipe.
		urls = []string{"nats://in-process"}
		opts = append(opts, nats.InProcessServer(local))
	} else {
		tc, err := a.ClientTLS()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	return nats.Connect(strings.Join(urls, ","), opts...)
}

// Ensure creates or updates the events, heartbeats and states streams and
// the desired-state bucket. It is idempotent and safe to run from several
// services at once.
func (s *Service) Ensure(ctx context.Context) error {
	js, err := jetstream.New(s.Conn)
	if err != nil {
		return err
	}
	_, err = s.ensure(ctx, js)
	return err
}

func (s *Service) ensure(ctx context.Context, js jetstream.JetStream) (*store.Handles, error) {
	if err := s.migrateEvents(ctx, js); err != nil {
		return nil, fmt.Errorf("events stream %s: %w", linkproto.EventsStream, err)
	}
	return store.Ensure(ctx, js, s.Mesh, s.EventsMaxAge)
}

// Run sets up the streams (trying again until the broker answers), then
// answers hellos until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	if s.Key == nil {
		return errors.New("the control service has no declaration key to sign its answers with")
	}
	js, err := jetstream.New(s.Conn)
	if err != nil {
		return err
	}
	retry := s.RetryEvery
	if retry == 0 {
		retry = 2 * time.Second
	}
	var b *store.Handles
	for {
		ectx, cancel := context.WithTimeout(ctx, dialTimeout)
		b, err = s.ensure(ectx, js)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		s.Log.Warn("cannot set up the streams yet; trying again", "err", err, "in", retry)
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	// Answered while the node still waits: a hello for 5 s
	// (link.DefaultHelloTimeout), a sync for 2 s.
	sub, err := answer(ctx, s.Conn, s.Log, "hellos", linkproto.AllHellos(s.Mesh), 4*time.Second, func(m *nats.Msg) {
		s.hello(ctx, b.Events, b.Desired, m)
	})
	if err != nil {
		return fmt.Errorf("subscribe to hellos: %w", err)
	}
	defer sub.Unsubscribe()
	syncs, err := answer(ctx, s.Conn, s.Log, "syncs", linkproto.AllSyncs(s.Mesh), 1500*time.Millisecond, func(m *nats.Msg) {
		s.sync(ctx, b.Events, m)
	})
	if err != nil {
		return fmt.Errorf("subscribe to syncs: %w", err)
	}
	defer syncs.Unsubscribe()
	if s.Issuer != nil {
		enrols, err := s.Conn.QueueSubscribe(linkproto.AllEnrols(s.Mesh), linkproto.ControlQueue, func(m *nats.Msg) {
			s.enrol(ctx, b, m)
		})
		if err != nil {
			return fmt.Errorf("subscribe to enrolments: %w", err)
		}
		defer enrols.Unsubscribe()
		renews, err := s.Conn.QueueSubscribe(linkproto.AllRenews(s.Mesh), linkproto.ControlQueue, func(m *nats.Msg) {
			s.renew(ctx, b, m)
		})
		if err != nil {
			return fmt.Errorf("subscribe to renewals: %w", err)
		}
		defer renews.Unsubscribe()
	}
	if s.Ready != nil {
		// The subscriptions are the broker's once it answered a flush.
		if err := s.Conn.FlushTimeout(dialTimeout); err != nil {
			return fmt.Errorf("subscribe: %w", err)
		}
		s.Ready()
	}
	s.Log.Info("answering hellos", "mesh", s.Mesh, "subject", linkproto.AllHellos(s.Mesh))
	<-ctx.Done()
	return nil
}

// hello answers one Hello with how much of the node's journal the
// events stream holds and its stored declaration, if newer than the one
// it has accepted.
func (s *Service) hello(ctx context.Context, events jetstream.Stream, desired *store.Desired, m *nats.Msg) {
	var h linkproto.Hello
	answerRequest(ctx, s, m, request[linkproto.Welcome]{
		what: "hello",
		from: s.fromNode,
		decode: func(data []byte) (string, error) {
			err := linkproto.Decode(data, linkproto.MaxReportSize, &h)
			return h.Node, err
		},
		answer: func(ctx context.Context, node string) (linkproto.Welcome, error) {
			w, err := welcome(ctx, events, desired, s.Mesh, node, h.Revision, h.Local)
			w.Nonce = h.Nonce
			return w, err
		},
		sign: func(w *linkproto.Welcome, node string) error { return w.Sign(s.Key, s.Mesh, node) },
		sent: func(node string, w *linkproto.Welcome) {
			revision := uint64(0)
			if w.Declaration != nil {
				revision = w.Declaration.Revision
			}
			s.Log.Debug("hello answered", "node", node, "version", h.Version, "events_through", w.EventsThrough, "declaration", revision)
		},
	})
}

// sync answers one Sync with how much of the node's journal the events
// stream holds.
func (s *Service) sync(ctx context.Context, events jetstream.Stream, m *nats.Msg) {
	var q linkproto.Sync
	answerRequest(ctx, s, m, request[linkproto.Synced]{
		what: "sync",
		from: s.fromNode,
		decode: func(data []byte) (string, error) {
			err := linkproto.Decode(data, linkproto.MaxReportSize, &q)
			return q.Node, err
		},
		answer: func(ctx context.Context, node string) (linkproto.Synced, error) {
			through, err := eventsThrough(ctx, events, s.Mesh, node, q.Sent)
			return linkproto.Synced{Protocol: linkproto.ProtocolVersion, EventsThrough: through, Nonce: q.Nonce}, err
		},
		sign: func(a *linkproto.Synced, node string) error { return a.Sign(s.Key, s.Mesh, node) },
	})
}

// welcome is the answer to node's hello: how much of its journal the events
// stream holds, and its stored declaration if newer than accepted, or, to
// a node under a local override (local), if it is a reclaim: the
// override's revision is not the mesh's, and a reclaim is the only
// declaration it takes.
func welcome(ctx context.Context, events jetstream.Stream, desired *store.Desired, mesh, node string, accepted uint64, local bool) (linkproto.Welcome, error) {
	w := linkproto.Welcome{Protocol: linkproto.ProtocolVersion}
	through, err := eventsThrough(ctx, events, mesh, node, 0)
	if err != nil {
		return w, err
	}
	w.EventsThrough = through
	stored, err := desired.Push(ctx, node)
	if err != nil {
		return w, err
	}
	if stored != nil && (stored.Revision > accepted || local && stored.Reclaim) {
		w.Declaration = stored
	}
	return w, nil
}

// eventsThrough is how much of node's journal the events stream holds:
// the sequence of its last record there, read from the subject (only the
// node may publish there; a header or the body say what the node chose),
// then on over the records stored after it out of order, so that the
// node, which resumes sending after the answer, never resends only
// records the stream refuses; 0 for none.
//
// sent is the last record the node says it sent (0: unknown). When the
// stream holds it, that is where to start reading on: one lookup of a
// subject, where the last of the node's wildcard walks every record
// subject of the node (about 5 ms at 100k records), and a sending node
// asks every 50 ms.
func eventsThrough(ctx context.Context, events jetstream.Stream, mesh, node string, sent uint64) (uint64, error) {
	if sent > 0 {
		_, err := events.GetLastMsgForSubject(ctx, linkproto.EventSubject(mesh, node, sent))
		if err == nil {
			return readOn(ctx, events, mesh, node, sent)
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return 0, fmt.Errorf("the event %d of %s: %w", sent, node, err)
		}
	}
	m, err := events.GetLastMsgForSubject(ctx, linkproto.NodeEvents(mesh, node))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("the last event of %s: %w", node, err)
	}
	_, _, seq, err := linkproto.ParseEventSubject(m.Subject)
	if err != nil {
		return 0, fmt.Errorf("the last event of %s (stream sequence %d): %w", node, m.Sequence, err)
	}
	return readOn(ctx, events, mesh, node, seq)
}

// readOn returns the last of node's records held from seq (held) on
// without a gap.
func readOn(ctx context.Context, events jetstream.Stream, mesh, node string, seq uint64) (uint64, error) {
	for {
		_, err := events.GetLastMsgForSubject(ctx, linkproto.EventSubject(mesh, node, seq+1))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return seq, nil
		}
		if err != nil {
			return 0, fmt.Errorf("the event %d of %s: %w", seq+1, node, err)
		}
		seq++
	}
}
