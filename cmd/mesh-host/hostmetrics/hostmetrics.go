// Package hostmetrics is the host's own Prometheus series, served on
// /metrics by `mesh-host serve --metrics-listen`: what its reconciles did,
// counted as they are journaled, and what its stored projection says,
// read when scraped.
//
// The counters are fed by the journal (Appended, wired to
// journal.Options.Appended): every record the service process appends,
// its own reconciles and those a client's command runs inside it, counts
// once it has committed. They start at 0 with the process. The gauges are
// read from the stored projection and journal.Info when scraped, never
// from the journal's records, and the part that walks every owned resource
// is computed again only when the projection's head moved.
//
// Every label is bounded by a vocabulary of this package (a resource's
// kind, a trigger, a result, a state): never a resource id, a path, an
// error's text or anything else a declaration chooses. It is not the
// control plane's series (meshctl's) and knows nothing of the service
// that runs it.
package hostmetrics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// The causes of a change (mesh_host_changes_total's cause), as Puppet's
// corrective_change tells them apart.
const (
	// CauseIntended is a change a declaration asked for: a resource new
	// to the host, or whose spec changed, or no longer declared.
	CauseIntended = "intended"
	// CauseCorrective is drift repaired: the resource had a drift.observed
	// since its last successful resource.applied (projector.Owned.Drifted).
	CauseCorrective = "corrective"
)

// OtherLabel stands for any value outside a label's vocabulary: a kind
// no driver knows, a trigger or result a newer version journals.
const OtherLabel = "other"

// kinds are the resource kinds a label may name: the drivers'.
var kinds = map[drivers.Kind]bool{
	drivers.KindFile: true, drivers.KindDirectory: true, drivers.KindArchive: true, drivers.KindPackage: true,
	drivers.KindUnit: true, drivers.KindExec: true, drivers.KindUser: true, drivers.KindGroup: true,
}

// KindOf is the kind label of the resource id: its kind prefix
// (file:/etc/motd is file) when a driver knows it, else OtherLabel.
func KindOf(id string) string {
	k, _, ok := drivers.SplitID(id)
	if !ok || !kinds[k] {
		return OtherLabel
	}
	return string(k)
}

// TriggerLabel is the trigger label of a reconcile's trigger: the words a
// person uses (the journal's "pushed" is push), OtherLabel for one this
// version does not know.
func TriggerLabel(t event.Trigger) string {
	switch t {
	case event.TriggerPushed:
		return "push"
	case event.TriggerStart, event.TriggerReconnect, event.TriggerTimer, event.TriggerManual, event.TriggerWatch:
		return string(t)
	}
	return OtherLabel
}

// resultLabel is the result label of a reconcile's result.
func resultLabel(r event.Result) string {
	switch r {
	case event.ResultConverged, event.ResultFailed:
		return string(r)
	}
	return OtherLabel
}

// Build names the running host for mesh_host_build_info.
type Build struct {
	// Version is the running version's name, as status shows it; Label
	// the build label set at link time.
	Version, Label string
}

// Metrics is the host's series. Appended counts what is journaled; Attach
// gives it the journal its gauges are read from; Serve serves them.
type Metrics struct {
	reg *prometheus.Registry

	duration      *prometheus.HistogramVec
	reconciles    *prometheus.CounterVec
	changes       *prometheus.CounterVec
	drift         *prometheus.CounterVec
	lastReconcile *prometheus.GaugeVec
	linkUp        prometheus.Gauge

	mu sync.Mutex
	// drifted holds the owned resources with a drift.observed since their
	// last successful outcome: the projection's Owned.Drifted, kept here
	// so that an outcome tells corrective from intended without a read.
	// Only drifted ids: at most the owned set, and in practice a few.
	drifted map[string]struct{}
	// released counts the resources released since the process started.
	released int

	stored *storedCollector
}

// New makes the host's series, every counter at 0 with each label
// combination a person would look for already there (a rate over a series
// that appears on its first increment misses that increment).
func New(b Build) *Metrics {
	m := &Metrics{
		reg:     prometheus.NewRegistry(),
		drifted: make(map[string]struct{}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mesh_host_reconcile_duration_seconds",
			Help: "How long each reconcile this process ran took, from its start to its reconcile.completed, by what triggered it.",
			// A quiet timer reconcile takes milliseconds; a first apply of
			// tens of thousands of files, minutes.
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10),
		}, []string{"trigger"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_host_reconciles_total",
			Help: "Reconciles completed by this process since it started, by what triggered them and their result (converged or failed).",
		}, []string{"trigger", "result"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_host_changes_total",
			Help: "Resources created, updated or deleted by this process since it started, by resource kind and cause: intended (a declaration asked for it) or corrective (drift repaired).",
		}, []string{"kind", "cause"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mesh_host_drift_found_total",
			Help: "Drift observed by this process since it started (drift.observed records): an owned resource found not as it was applied, by resource kind.",
		}, []string{"kind"}),
		lastReconcile: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mesh_host_last_reconcile_timestamp_seconds",
			Help: "When the latest reconcile of each result completed, in seconds since the Unix epoch.",
		}, []string{"result"}),
		linkUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mesh_host_link_up",
			Help: "1 while this process's link to the control plane is up, else 0 (also when the host is not enrolled).",
		}),
	}
	buildInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "mesh_host_build_info",
		Help:        "Always 1: the running version's name (as status shows it) and the build label set at link time.",
		ConstLabels: prometheus.Labels{"version": labelValue(b.Version), "label": labelValue(b.Label)},
	})
	buildInfo.Set(1)
	m.stored = &storedCollector{m: m}
	m.reg.MustRegister(m.duration, m.reconciles, m.changes, m.drift, m.lastReconcile, m.linkUp, buildInfo, m.stored)
	for _, t := range []event.Trigger{event.TriggerPushed, event.TriggerStart, event.TriggerReconnect, event.TriggerTimer, event.TriggerManual, event.TriggerWatch} {
		m.duration.WithLabelValues(TriggerLabel(t))
		for _, r := range []event.Result{event.ResultConverged, event.ResultFailed} {
			m.reconciles.WithLabelValues(TriggerLabel(t), string(r))
		}
	}
	for k := range kinds {
		m.drift.WithLabelValues(string(k))
		for _, c := range []string{CauseIntended, CauseCorrective} {
			m.changes.WithLabelValues(string(k), c)
		}
	}
	return m
}

// maxLabel bounds the build labels' values: they are the host's own, but
// a version directory's name is whatever was delivered.
const maxLabel = 128

// labelValue is s as a label's value: valid UTF-8, bounded.
func labelValue(s string) string {
	s = strings.ToValidUTF8(s, "?")
	for len(s) > maxLabel {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}

// Attach gives m the journal its gauges are read from, and seeds what m
// keeps from the stored projection: which owned resources are drifted,
// and when the latest reconcile completed. Call it before the service
// appends its first record.
func (m *Metrics) Attach(j *journal.Journal) error {
	var last *projector.Reconcile
	drifted := make(map[string]struct{})
	err := j.Projection(func(v journal.View, _ uint64) error {
		s, err := projector.LoadSummary(v)
		if err != nil {
			return err
		}
		last = s.LastReconcile
		return projector.EachOwned(v, func(id string, o projector.Owned) error {
			if o.Drifted {
				drifted[id] = struct{}{}
			}
			return nil
		})
	})
	if err != nil {
		return hostjournal.AsDamage(j, err)
	}
	m.mu.Lock()
	for id := range drifted {
		m.drifted[id] = struct{}{}
	}
	m.mu.Unlock()
	if last != nil && !last.Completed.IsZero() {
		m.lastReconcile.WithLabelValues(resultLabel(last.Result)).Set(seconds(last.Completed))
	}
	m.stored.attach(j)
	return nil
}

// Appended counts recs, the records of one append as stored
// (journal.Options.Appended).
func (m *Metrics) Appended(recs []event.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range recs {
		switch r.Kind {
		case event.ResourceApplied:
			m.applied(r)
		case event.DriftObserved:
			m.drift.WithLabelValues(KindOf(r.Resource)).Inc()
			if r.Resource != "" {
				m.drifted[r.Resource] = struct{}{}
			}
		case event.ReconcileCompleted:
			var p event.ReconcileCompletedPayload
			if json.Unmarshal(r.Payload, &p) != nil {
				continue // the projection counts what does not decode
			}
			trigger, result := TriggerLabel(p.Trigger), resultLabel(p.Result)
			m.reconciles.WithLabelValues(trigger, result).Inc()
			if !p.Started.IsZero() {
				m.duration.WithLabelValues(trigger).Observe(max(r.Time.Sub(p.Started).Seconds(), 0))
			}
			m.lastReconcile.WithLabelValues(result).Set(seconds(r.Time))
		case event.LinkUp:
			m.linkUp.Set(1)
		case event.LinkDown:
			m.linkUp.Set(0)
		}
	}
}

// applied counts one resource.applied: a change, intended or corrective,
// or a release. As the projection does, a successful outcome ends the
// resource's drift and a failed one keeps it.
func (m *Metrics) applied(r event.Record) {
	switch action := actionOf(r.Payload); action {
	case event.ActionCreate, event.ActionUpdate, event.ActionDelete:
		cause := CauseIntended
		if _, drifted := m.drifted[r.Resource]; drifted {
			cause = CauseCorrective
		}
		m.changes.WithLabelValues(KindOf(r.Resource), cause).Inc()
		delete(m.drifted, r.Resource)
	case event.ActionReleased:
		// Left in place and no longer owned: nothing on the machine
		// changed, so it is no change; the projection forgets it.
		m.released++
		delete(m.drifted, r.Resource)
	case event.ActionUnchanged:
		delete(m.drifted, r.Resource)
	}
}

// actionPrefix is how a resource.applied's payload begins as the agent
// encodes it (event.ResourceAppliedPayload's first field): a reconcile of
// 100,000 resources reads the action of each without decoding them.
var actionPrefix = []byte(`{"action":"`)

// actionOf is the action of a resource.applied's payload; empty when it
// does not decode.
func actionOf(payload []byte) event.Action {
	if rest, ok := bytes.CutPrefix(payload, actionPrefix); ok {
		if i := bytes.IndexByte(rest, '"'); i > 0 && bytes.IndexByte(rest[:i], '\\') < 0 {
			switch a := event.Action(rest[:i]); a {
			case event.ActionCreate, event.ActionUpdate, event.ActionDelete, event.ActionReleased, event.ActionUnchanged, event.ActionFailed:
				return a
			}
		}
	}
	var p struct {
		Action event.Action `json:"action"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return ""
	}
	return p.Action
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Handler serves the series: at most two scrapes at once (a third is
// answered 503), each cut off after scrapeTimeout.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		MaxRequestsInFlight: 2,
		Timeout:             scrapeTimeout,
		ErrorHandling:       promhttp.HTTPErrorOnError,
		// A scrape is a few kilobytes: a compressor's buffers would be
		// most of what the metrics cost the host's memory.
		DisableCompression: true,
	})
}

// scrapeTimeout bounds one scrape: a host of 100,000 resources walks them
// in well under a second when its projection moved.
const scrapeTimeout = 10 * time.Second

// Serve serves /metrics on ln until ctx ends (anything else is 404), and
// closes ln. Plain HTTP: the series carry no secret, and the flag's help
// says to bind it to loopback or a private address.
func (m *Metrics) Serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.Handler())
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      scrapeTimeout + 5*time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Registry is the registry the series are in, for a test to gather.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }
