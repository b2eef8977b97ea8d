// Package fleetmetrics is the fleet's Prometheus series, as the control
// service reads them from the mesh: nodes by state and by version, the
// age of their heartbeats, the nodes in trouble, the rollouts' waves, the
// pushes and enrolments this service made, and the declarations the nodes
// journaled. `meshctl serve --http-listen` serves its registry at
// /metrics (docs/metrics.md lists every series).
//
// It is not the HTTP server, nor its authentication, nor the host's own
// series (`mesh-host serve --metrics-listen`). It changes nothing in the
// mesh: what it shows comes from the control plane's own reads
// (client.Client) and from the counters the node service and the rollout
// driver tell it (Enrolled, Pushed).
package fleetmetrics

import (
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
)

// Defaults of Config's bounds.
const (
	// DefaultMaxAge: a scrape storm reads the broker at most once every
	// five seconds, and Prometheus's usual interval (15 s or more) is
	// never served stale data older than a third of it.
	DefaultMaxAge = 5 * time.Second
	// DefaultTimeout bounds one snapshot's reads. At 10,000 nodes a
	// listing takes about a second here (docs/performance.md).
	DefaultTimeout = 10 * time.Second
	// DefaultMaxVersions distinct versions are series of their own; the
	// rest count as "other". A fleet mid-rollout runs two or three.
	DefaultMaxVersions = 20
	// DefaultMaxProblemNodes per-node series at most; the rest are
	// counted in mesh_node_problems_omitted.
	DefaultMaxProblemNodes = 1000
	// DefaultMaxRollouts: the active rollout and the latest few.
	DefaultMaxRollouts = 5
	// DefaultMaxWaves of a rollout are series of their own; later waves
	// are counted together as wave="rest" (a rollout of one node a wave
	// over 10,000 nodes has 10,000 waves).
	DefaultMaxWaves = 50
)

// Config is what New is told.
type Config struct {
	// Conn is a connection as the control user: the control service's.
	Conn *nats.Conn
	// Mesh is the mesh whose fleet it shows.
	Mesh string
	// Log receives the reads that failed; nil: discarded.
	Log *slog.Logger
	// Now is the clock heartbeats' ages are measured by; time.Now when
	// nil.
	Now func() time.Time
	// MaxAge is how long a snapshot of the fleet serves scrapes before it
	// is read again; DefaultMaxAge when zero.
	MaxAge time.Duration
	// Timeout bounds one snapshot's reads; DefaultTimeout when zero.
	Timeout time.Duration
	// The bounds on series; their defaults when zero.
	MaxVersions, MaxProblemNodes, MaxRollouts, MaxWaves int
}

// Metrics is the fleet's series: one registry, read at each scrape (at
// most once every MaxAge), and the counters the control service's parts
// tell it. Its methods are safe for concurrent use.
type Metrics struct {
	cfg Config
	c   *client.Client
	reg *prometheus.Registry

	enrolments   *prometheus.CounterVec
	pushes       *prometheus.CounterVec
	declarations *prometheus.CounterVec

	fleet *fleetCollector

	// since is when the metrics began: the nodes' records stored from
	// then on are counted, however late the events stream's consumer
	// starts. followed is the stream sequence of the last record counted,
	// where a consumer made again goes on from.
	since    time.Time
	followed atomic.Uint64
}

// New returns the fleet's metrics over cfg.Conn. It starts nothing: Run
// follows the nodes' journals, and a scrape reads the rest.
func New(cfg Config) *Metrics {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	cfg.MaxAge = orDefault(cfg.MaxAge, DefaultMaxAge)
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	cfg.MaxVersions = orDefault(cfg.MaxVersions, DefaultMaxVersions)
	cfg.MaxProblemNodes = orDefault(cfg.MaxProblemNodes, DefaultMaxProblemNodes)
	cfg.MaxRollouts = orDefault(cfg.MaxRollouts, DefaultMaxRollouts)
	cfg.MaxWaves = orDefault(cfg.MaxWaves, DefaultMaxWaves)
	since := cfg.Now()
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry(), since: since}
	if cfg.Conn != nil {
		// NewClient fails only when JetStream cannot be set up on the
		// connection, which it does without a round trip: never here.
		if c, err := client.NewClient(cfg.Conn, cfg.Mesh); err == nil {
			c.Now = cfg.Now
			m.c = c
		}
	}
	m.enrolments = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_enrolments_total",
		Help: "Enrolment tokens presented to this control service, by result: accepted (credentials issued) or refused (expired, reused, revoked, foreign or edited token).",
	}, []string{"result"})
	m.pushes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_rollout_pushes_total",
		Help: "Declarations this control service's rollout driver pushed to nodes, by outcome: accepted, refused (the node said no), unanswered (offline: stored for its next hello) or error. Pushes by `meshctl declare` run in the operator's process and are not counted here.",
	}, []string{"outcome"})
	m.declarations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mesh_node_declarations_total",
		Help: "Declaration records the nodes journaled, as the events stream stored them (each record once) since this control service started: outcome received, reapplied (the one already desired) or refused; via push, link (a hello's welcome or a sync), file (mesh-host apply) or other.",
	}, []string{"outcome", "via"})
	for _, r := range []string{"accepted", "refused"} {
		m.enrolments.WithLabelValues(r)
	}
	for _, o := range []string{client.PushAccepted, client.PushRefused, client.PushUnanswered, client.PushFailed} {
		m.pushes.WithLabelValues(o)
	}
	for _, o := range []string{outcomeReceived, outcomeReapplied, outcomeRefused} {
		for _, v := range []string{viaPush, viaLink} {
			m.declarations.WithLabelValues(o, v)
		}
	}
	m.fleet = newFleetCollector(m)
	m.reg.MustRegister(m.enrolments, m.pushes, m.declarations, m.fleet,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry to serve: promhttp.HandlerFor(m.Registry(), …).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Enrolled counts one enrolment token presented: for
// nodeservice.Service.Enrolled.
func (m *Metrics) Enrolled(accepted bool) {
	r := "refused"
	if accepted {
		r = "accepted"
	}
	m.enrolments.WithLabelValues(r).Inc()
}

// Pushed counts one push by the rollout driver with its outcome (one of
// client's Push… constants): for client.RolloutDriver.Pushed.
func (m *Metrics) Pushed(outcome string) {
	switch outcome {
	case client.PushAccepted, client.PushRefused, client.PushUnanswered, client.PushFailed:
	default:
		outcome = client.PushFailed // a label is never a caller's free text
	}
	m.pushes.WithLabelValues(outcome).Inc()
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// snapshotCache holds the latest fleet read, and reads it again when the
// last try is older than maxAge: one read at a time, the scrapes that
// arrive during it wait for it rather than start their own. A read that
// fails leaves the previous one served (its time says how old it is) and
// is not tried again before maxAge either: a broker in trouble is not
// asked more often for it.
type snapshotCache struct {
	mu     sync.Mutex
	latest *snapshot // nil until a read succeeded
	tried  time.Time
	read   func() (*snapshot, error)
	failed func(error)
	maxAge time.Duration
	now    func() time.Time
}

func (s *snapshotCache) get() *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := s.now(); s.tried.IsZero() || now.Sub(s.tried) >= s.maxAge {
		s.tried = now
		snap, err := s.read()
		if err != nil {
			s.failed(err)
		} else {
			s.latest = snap
		}
	}
	return s.latest
}

// Handler serves the registry's exposition at /metrics: at most two
// scrapes at once (each is one read of the fleet, shared for a few
// seconds), each bounded in time; a failed gathering is logged.
func (m *Metrics) Handler(log *slog.Logger) http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 2,
		Timeout:             30 * time.Second,
	})
}
