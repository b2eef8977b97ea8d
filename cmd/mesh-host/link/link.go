// Package link is the host's end of its link to the control plane: one
// outbound NATS connection, scoped to the node's own subjects (package
// linkproto names them all).
//
// Down, it takes pushed declarations and hands them to the host, which
// journals them as accepted or refused; messages that are not a
// declaration for this node are refused here and journaled as link.refused.
// Plan requests are checked the same way and handed to the host one at a
// time; the host plans them and changes nothing.
// Up, it says hello on every link up (and hands the host the declaration
// the control plane holds, if newer), publishes the journal to the events
// stream exactly once (each record on its own subject, which the stream
// holds one message on; the node never calls the JetStream API), and sends
// heartbeats.
//
// It is not the reconciler and decides nothing about a declaration; and it
// keeps nothing the journal does not: offline is normal, and what the
// control plane missed is sent from the journal when the link returns. It
// never embeds a NATS server.
package link

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

// Errors returned by this package.
var (
	// ErrConfig is returned by New for a Config it cannot run with.
	ErrConfig = errors.New("invalid link configuration")
)

// Defaults of Config, and the link's fixed timings.
const (
	DefaultHeartbeatInterval = 60 * time.Second
	DefaultHelloTimeout      = 5 * time.Second
	DefaultReconnectMin      = 250 * time.Millisecond
	DefaultReconnectMax      = 30 * time.Second
	// DefaultPingInterval: see maxPingsOut.
	DefaultPingInterval = 20 * time.Second

	// A path that died without a word (a NAT or firewall that forgot the
	// connection, a machine that slept, a cable) is noticed by the
	// kernel: keepAliveCount TCP keepalives keepAliveInterval apart
	// after keepAliveIdle of silence, about 30 s, and userTimeout when
	// data sent stays unacknowledged. That costs the broker nothing: its
	// kernel answers them, its process never wakes.
	keepAliveIdle     = 10 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 4
	userTimeout       = 30 * time.Second
	// A broker whose process stopped answering while its machine still
	// does, or a path cut where something in between still answers TCP
	// (a proxy, a NAT that keeps the socket), is noticed only by the
	// host's pings: the third tick with maxPingsOut unanswered ends the
	// connection, so link.down is journaled 40–60 s after the broker last
	// answered at the default 20 s. Pings cost the broker: each wakes the
	// connection's two goroutines, and the PONG's write grows the
	// writer's stack to 32 KB (nats-server's flush keeps 24 KB of vectors
	// on the stack) until collections shrink it again. At 20 s that is
	// 500 PONGs a second for 10,000 nodes, which an idle broker bears; a
	// minute (the default until issue 30) left a dead link unnoticed for
	// three, and the broker's own pings (broker.DefaultPingInterval) are
	// skipped while the host's keep the connection busy.
	maxPingsOut = 2
	// maxInFlight bounds the events published beyond what the stream is
	// known to hold.
	maxInFlight = 4096
	// Config.MarkEvery and markAfter batch MarkAcked, an fsync'd commit of its
	// own: MarkEvery after the mark first moves, or at once after
	// markAfter acknowledgements. Meanwhile the mark rides the journal's
	// next append (NoteAcked), which a busy host soon makes: a push's
	// records are acknowledged half a second after they are sent, and a
	// commit for them alone soon after would be a good share of the
	// flushes of a push on the host.
	markAfter = 1000
	// refusalsPerMinute bounds the link.refused records journaled; the rest
	// are counted in the next one's Suppressed.
	refusalsPerMinute = 10
	// maxReason bounds a reason sent in an Ack or journaled as link.refused.
	maxReason = 4 << 10
	// farewellTimeout bounds the wait, at shutdown, for the broker to
	// take the last heartbeat (see farewell): a broker that does not
	// answer must not hold the host's stop.
	farewellTimeout = 2 * time.Second
	// drainTimeout bounds the wait, at shutdown, for a declaration being
	// handled to be answered.
	drainTimeout = 5 * time.Second
	// failurePoll is how often, while down, the link looks at why its
	// last connection attempt failed: nats.go retries a failed handshake
	// without telling any callback.
	failurePoll = time.Second
)

// stoppingReason is why the link goes down when the host stops: journaled
// as link.down and said upward in the last heartbeat.
const stoppingReason = "the host is stopping"

// defaultMarkEvery is Config.MarkEvery's default.
const defaultMarkEvery = 10 * time.Second

// Config says which node the link speaks for and where the broker is.
type Config struct {
	Mesh, Node string
	// URLs are the broker's addresses (nats://host:4222, tls://…).
	URLs []string
	// TLS is what the broker is verified by: its RootCAs are the mesh's
	// CA and nothing else. The link connects with TLS whatever the URLs'
	// scheme, and a server that cannot prove itself is never spoken to.
	// Nil only with AllowPlaintext.
	TLS *tls.Config
	// AllowPlaintext lets the link run without TLS (TLS nil): nothing
	// authenticates the broker, so whatever answers at its address can
	// push declarations. Only for a configuration that says so.
	AllowPlaintext bool
	// CredsFile is the node's NATS credentials file; empty for none (a
	// test broker without authentication).
	CredsFile string
	// Credentials renews the credentials in CredsFile before they expire;
	// nil for none.
	Credentials Credentials
	// Trust is the mesh's signing key (public), learnt at enrolment: the
	// link hands the host only declarations it signed, and believes only
	// welcomes and synceds it signed.
	Trust string
	// Version is the running host's version, for hellos and heartbeats;
	// Build its build label.
	Version, Build string
	// HeartbeatInterval is how often the host reports while idle;
	// DefaultHeartbeatInterval when 0.
	HeartbeatInterval time.Duration
	// PingInterval is how often the host asks the broker whether it
	// still answers; DefaultPingInterval when 0.
	PingInterval time.Duration
	// HelloTimeout is how long one hello waits for a welcome;
	// DefaultHelloTimeout when 0.
	HelloTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the reconnect delay, which
	// doubles from min to max with ±20 % jitter; defaults when 0.
	ReconnectMin, ReconnectMax time.Duration
	// MarkEvery is how long after the acknowledged mark first moves it is
	// persisted, unless an append carried it first (see syncAcks); 10 s
	// when 0.
	MarkEvery time.Duration
	Log       *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Host is what the link needs of the host.
type Host interface {
	// Accept journals d as accepted (to be applied now) or refused, and
	// answers with the Ack to send. trigger is TriggerPushed for a push,
	// TriggerReconnect for the declaration of a welcome. It must not wait
	// for an apply in flight.
	Accept(ctx context.Context, d *linkproto.Declaration, trigger event.Trigger) linkproto.Ack
	// State is the host's current projection.
	State() (projector.State, error)
	// Head is the journal's head: the state changes only when it moves.
	Head() (uint64, error)
	// Plan computes what applying p's declaration would change, changing
	// nothing, and journals that it answered; the link fills in the
	// answer's protocol, node and revision. It is called for one request
	// at a time, and must return promptly once ctx ends.
	Plan(ctx context.Context, p *linkproto.PlanRequest) linkproto.PlanAnswer
}

// Journal is the host's journal as the link uses it: it records the link's
// own events and is the only source of the events sent upward.
type Journal interface {
	Append(recs ...event.Record) ([]event.Record, error)
	Info() (journal.Info, error)
	Follow(ctx context.Context, from uint64, fn func(event.Record) error) error
	MarkAcked(seq uint64) error
	NoteAcked(seq uint64)
	// Document returns a document a record names (see withDocument).
	Document(sum journal.Sum) ([]byte, error)
}

var _ Journal = (*journal.Journal)(nil)

// Link is the host's link. Make one with New; Run it once.
type Link struct {
	cfg     Config
	host    Host
	j       Journal
	log     *slog.Logger
	started time.Time

	// reconciled is poked by Reconciled: a heartbeat is due.
	reconciled chan struct{}
	// acked is the highest sequence the events stream acknowledged, over
	// a contiguous run of the journal (moved by ackThrough); marked is
	// how much of it is persisted with MarkAcked.
	acked, marked atomic.Uint64

	refusals refusalLimiter
	// planning holds the plan request being answered (one slot); plans
	// are the goroutines answering them, waited for at the end of Run.
	planning chan struct{}
	plans    sync.WaitGroup
	planRate planLimiter
	// st is the connection's state, which Run makes.
	st *connState
}

// New checks cfg and returns a link that is not yet running.
func New(cfg Config, host Host, j Journal) (*Link, error) {
	if err := linkproto.ValidName(cfg.Mesh); err != nil {
		return nil, fmt.Errorf("%w: mesh: %v", ErrConfig, err)
	}
	if err := linkproto.ValidName(cfg.Node); err != nil {
		return nil, fmt.Errorf("%w: node: %v", ErrConfig, err)
	}
	if len(cfg.URLs) == 0 {
		return nil, fmt.Errorf("%w: no broker address", ErrConfig)
	}
	if err := linkproto.ValidSigningKey(cfg.Trust); err != nil {
		return nil, fmt.Errorf("%w: the mesh's signing key: %v (enrol again with a new token)", ErrConfig, err)
	}
	if cfg.TLS == nil && !cfg.AllowPlaintext {
		return nil, fmt.Errorf("%w: no TLS configuration: nothing would authenticate the broker", ErrConfig)
	}
	if cfg.TLS != nil && cfg.AllowPlaintext {
		return nil, fmt.Errorf("%w: TLS and plaintext both asked for", ErrConfig)
	}
	if host == nil || j == nil {
		return nil, fmt.Errorf("%w: a host and a journal are required", ErrConfig)
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if cfg.MarkEvery <= 0 {
		cfg.MarkEvery = defaultMarkEvery
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = DefaultHelloTimeout
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = DefaultReconnectMin
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = max(DefaultReconnectMax, cfg.ReconnectMin)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("mesh", cfg.Mesh, "node", cfg.Node)
	return &Link{cfg: cfg, host: host, j: j, log: log, reconciled: make(chan struct{}, 1), planning: make(chan struct{}, 1)}, nil
}

// Reconciled tells the link that a reconcile completed: a heartbeat goes
// out now if the link is up. It never blocks.
func (l *Link) Reconciled() {
	select {
	case l.reconciled <- struct{}{}:
	default:
	}
}

// Acked is the highest journal sequence the events stream acknowledged.
func (l *Link) Acked() uint64 { return l.acked.Load() }

// Run connects and serves the link until ctx ends, then returns nil. Being
// offline is not an error: it keeps reconnecting, with a capped, jittered
// exponential delay, for as long as it runs.
func (l *Link) Run(ctx context.Context) error {
	info, err := l.j.Info()
	if err != nil {
		return fmt.Errorf("link: read the journal: %w", err)
	}
	l.acked.Store(info.Acked)
	l.marked.Store(info.Acked)
	l.started = l.cfg.Now()

	st := newConnState()
	l.st = st
	opts := []nats.Option{
		nats.Name("mesh-host " + l.cfg.Mesh + "/" + l.cfg.Node),
		nats.CustomInboxPrefix(linkproto.InboxPrefix(l.cfg.Mesh, l.cfg.Node)),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		// Credentials refused twice must not end the link for good: the
		// operator may fix them on the broker's side.
		nats.IgnoreAuthErrorAbort(),
		nats.CustomReconnectDelay(func(attempts int) time.Duration {
			return backoff(attempts-1, l.cfg.ReconnectMin, l.cfg.ReconnectMax)
		}),
		nats.SetCustomDialer(dialer()),
		nats.PingInterval(l.cfg.PingInterval),
		nats.MaxPingsOutstanding(maxPingsOut),
		// Nothing is buffered while down: what matters is resent from the
		// journal, and a stale heartbeat or ack is worse than none.
		nats.ReconnectBufSize(-1),
		nats.DrainTimeout(drainTimeout),
		nats.ConnectHandler(st.connected),
		nats.ReconnectHandler(st.connected),
		nats.ReconnectErrHandler(st.failed),
		nats.DisconnectErrHandler(st.disconnected),
		nats.ClosedHandler(st.closed),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if isAuthError(err) {
				// Refused credentials are kept trying (the operator may
				// enrol the node again), and journaled once while down.
				if st.refused() {
					l.journalLink(event.LinkDenied, "", l.refusedReason(err))
				}
				l.log.Warn("the broker refuses this node's credentials", "err", err)
				return
			}
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			l.log.Warn("link error", "subject", subj, "err", err)
		}),
	}
	if l.cfg.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(l.cfg.CredsFile))
	}
	if l.cfg.TLS != nil {
		// nats.go names the server from each URL's host, which the
		// certificate must be for.
		tc := l.cfg.TLS.Clone()
		tc.MinVersion = max(tc.MinVersion, tls.VersionTLS12)
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(strings.Join(l.cfg.URLs, ","), opts...)
	if err != nil {
		return fmt.Errorf("link: connect to %s: %w", strings.Join(l.cfg.URLs, ", "), err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe(linkproto.DeclarationSubject(l.cfg.Mesh, l.cfg.Node), func(m *nats.Msg) {
		l.onDeclaration(ctx, m)
	}); err != nil {
		return fmt.Errorf("link: subscribe: %w", err)
	}
	if _, err := nc.Subscribe(linkproto.PlanSubject(l.cfg.Mesh, l.cfg.Node), func(m *nats.Msg) {
		l.onPlan(ctx, m)
	}); err != nil {
		return fmt.Errorf("link: subscribe: %w", err)
	}
	// A plan being made ends with ctx; its answer, if the connection is
	// still up, goes out before Run returns.
	defer l.plans.Wait()

	var (
		sess    *session // running while the link is up
		sessGen uint64   // the connection generation sess serves
		broker  string   // the broker sess is connected to
		everUp  bool
		refused string // the broker refusal last journaled while down
	)
	poll := time.NewTicker(failurePoll)
	defer poll.Stop()
	for {
		var failure error
		select {
		case <-ctx.Done():
			if sess != nil {
				sess.stop()
				l.journalLink(event.LinkDown, broker, stoppingReason)
			}
			l.drain(nc, st)
			return nil
		case <-st.changed:
			failure = st.takeFailure()
		case <-poll.C:
			if sess != nil {
				continue
			}
			failure = nc.LastError()
		}
		gen, up, reason := st.snapshot()
		if !up && sess == nil && brokerRefused(failure) && failure.Error() != refused {
			// Once per reason while down: the link retries for as long
			// as it runs, and the journal must not fill with retries.
			refused = failure.Error()
			l.journalLink(event.LinkDown, strings.Join(l.cfg.URLs, ","), "refused the broker: "+refused)
			l.log.Error("refused the broker: it did not prove itself the mesh's; nothing is taken from it", "urls", strings.Join(l.cfg.URLs, ","), "err", failure)
		}
		if sess != nil && (!up || gen != sessGen) {
			// Down, or down and up again since: the session's in-flight
			// publishes are void either way.
			sess.stop()
			sess = nil
			l.journalLink(event.LinkDown, broker, reason)
			l.log.Info("link down", "broker", broker, "reason", reason)
		}
		if sess == nil && up {
			refused = ""
			sessGen, broker = gen, nc.ConnectedUrlRedacted()
			why := "connected"
			if everUp {
				why = "reconnected"
			}
			everUp = true
			l.journalLink(event.LinkUp, broker, why)
			l.log.Info("link up", "broker", broker)
			sess = l.startSession(ctx, nc)
		}
	}
}

// drain lets a declaration being handled be answered, then closes nc.
func (l *Link) drain(nc *nats.Conn, st *connState) {
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	t := time.NewTimer(drainTimeout + time.Second)
	defer t.Stop()
	select {
	case <-st.done:
	case <-t.C:
		nc.Close()
	}
}

// isAuthError reports whether err is the broker refusing the node's
// credentials.
func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked)
}

// refusedReason says why the broker refuses the credentials, as well as
// the link can tell.
func (l *Link) refusedReason(err error) string {
	reason := "the broker refuses this node's credentials: " + err.Error()
	if l.cfg.Credentials == nil {
		return reason
	}
	if _, _, expires, cerr := l.cfg.Credentials.Current(); cerr == nil && !l.cfg.Now().Before(expires) {
		return reason + fmt.Sprintf(" (they expired at %s: enrol this node again)", expires.UTC().Format(time.RFC3339))
	}
	return reason + " (revoked or expired: enrol this node again)"
}

func (l *Link) journalLink(k event.Kind, broker, reason string) {
	if _, err := l.j.Append(event.New(k, 0, "", event.LinkPayload{Broker: broker, Reason: reason})); err != nil {
		l.log.Error("journal "+string(k), "err", err)
	}
}

// brokerRefused says whether err, a failed connection attempt's, means the
// server at the broker's address was reached and not trusted: no TLS, or a
// certificate that is not the mesh CA's for that name.
func brokerRefused(err error) bool {
	return errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnWanted)
}

// connState collects what the connection's callbacks report, for Run's
// loop, which they wake through changed.
type connState struct {
	changed chan struct{}
	done    chan struct{}
	once    sync.Once

	mu     sync.Mutex
	gen    uint64 // counts connects and reconnects
	reason string // why the connection last went down
	up     bool
	// failure is why a connection attempt failed, until Run takes it.
	failure error
	// next is the reason of a disconnection the link asked for.
	next string
	// authRefused is set when a refusal of the credentials was journaled,
	// until the link is up again.
	authRefused bool
}

// expect says why the connection is about to go down, for the journal.
func (s *connState) expect(reason string) {
	s.mu.Lock()
	s.next = reason
	s.mu.Unlock()
}

// refused reports whether a refusal of the credentials is the first since
// the link was last up.
func (s *connState) refused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	first := !s.authRefused
	s.authRefused = true
	return first
}

func newConnState() *connState {
	return &connState{changed: make(chan struct{}, 1), done: make(chan struct{})}
}

func (s *connState) poke() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *connState) connected(*nats.Conn) {
	s.mu.Lock()
	s.gen++
	s.up = true
	s.authRefused = false
	s.mu.Unlock()
	s.poke()
}

func (s *connState) disconnected(_ *nats.Conn, err error) {
	s.mu.Lock()
	s.up = false
	s.reason = "disconnected"
	switch {
	case s.next != "":
		s.reason, s.next = s.next, ""
	case err != nil:
		s.reason = err.Error()
	}
	s.mu.Unlock()
	s.poke()
}

// failed is told of a connection attempt that failed: the first one's
// reason comes only this way.
func (s *connState) failed(_ *nats.Conn, err error) {
	s.mu.Lock()
	s.failure = err
	s.mu.Unlock()
	s.poke()
}

func (s *connState) takeFailure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.failure
	s.failure = nil
	return err
}

func (s *connState) closed(*nats.Conn) {
	s.mu.Lock()
	s.up = false
	s.mu.Unlock()
	s.once.Do(func() { close(s.done) })
	s.poke()
}

// snapshot says how many times the link came up, whether it is up, and
// why it last went down.
func (s *connState) snapshot() (gen uint64, up bool, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen, s.up, s.reason
}
