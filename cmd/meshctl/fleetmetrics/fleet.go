package fleetmetrics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/linkproto"
)

// maxVersionBytes bounds a version label: a node says what its version
// is, and a label is kept by every Prometheus that scrapes it.
const maxVersionBytes = 64

// Version label values that no version is shown as.
const (
	versionNone  = "none"  // the node never sent a heartbeat
	versionOther = "other" // past MaxVersions
)

// heartbeatAgeBuckets are the upper bounds of the heartbeat-age histogram,
// in seconds: a heartbeat comes every minute, a node is silent after
// three, and the longer ones tell a day from a week.
var heartbeatAgeBuckets = []float64{15, 30, 60, 90, 120, 180, 300, 600, 1800, 3600, 6 * 3600, 24 * 3600, 7 * 24 * 3600}

// problemStates are the states a node is shown in by name
// (mesh_node_problem): those that want someone to look. Offline (stopped
// on purpose), local (an override someone made), never heard and revoked
// are states a person chose; their counts are in mesh_nodes.
var problemStates = []string{client.StateSilent, client.StateBehind, client.StateFailed, client.StateRolledBack,
	client.StateDisconnected, client.StateUnreadable, client.StateExpired}

// allStates are the states mesh_nodes always has a series for, at zero
// when no node is in it: a graph or an alert finds the series there.
var allStates = []string{client.StateOK, client.StateBehind, client.StateFailed, client.StateRolledBack, client.StateLocal,
	client.StateSilent, client.StateOffline, client.StateDisconnected, client.StateNeverHeard, client.StateUnreadable,
	client.StateRevoked, client.StateExpired}

// allSteps are the steps mesh_rollout_wave_nodes has a series for in
// every wave shown.
var allSteps = []rollout.Step{rollout.StepPending, rollout.StepPushed, rollout.StepConverged, rollout.StepUnchanged,
	rollout.StepFailed, rollout.StepReverted, rollout.StepDeferred}

// allRolloutStates are the states mesh_rollout_state has a series for.
var allRolloutStates = []rollout.State{rollout.Running, rollout.Paused, rollout.Halted, rollout.Done, rollout.Aborted}

// snapshot is the fleet as one read saw it.
type snapshot struct {
	at       time.Time // when the read started
	took     time.Duration
	states   map[string]int
	versions map[string]int // bounded: see boundVersions
	// ages are the heartbeat ages in seconds of the nodes heard.
	ageCount   uint64
	ageSum     float64
	ageBuckets map[float64]uint64
	problems   []problem // at most MaxProblemNodes, by node name
	omitted    int       // problem nodes past the bound
	creds      map[string]int
	rollouts   []rolloutView
}

type problem struct{ node, state string }

// rolloutView is what the series show of one rollout.
type rolloutView struct {
	id, kind string
	state    rollout.State
	active   bool
	created  time.Time
	current  int                    // the current wave, -1 for none
	waves    []map[rollout.Step]int // by wave, the first MaxWaves
	rest     map[rollout.Step]int   // the waves past them, together
}

// fleetCollector is the series read from the mesh at a scrape.
type fleetCollector struct {
	m     *Metrics
	cache *snapshotCache

	nodes, versions, heartbeatAge, problem, problemsOmitted, credentials *prometheus.Desc
	waveNodes, rolloutState, rolloutWave, rolloutCreated                 *prometheus.Desc
	snapshotTime, snapshotDuration                                       *prometheus.Desc
	readErrors                                                           prometheus.Counter
}

func newFleetCollector(m *Metrics) *fleetCollector {
	f := &fleetCollector{m: m,
		nodes: prometheus.NewDesc("mesh_nodes",
			"Nodes of the mesh by state, as `meshctl nodes` shows them (ok, behind, failed, rolled back, local, silent, offline, disconnected, never heard, unreadable, revoked, expired).",
			[]string{"state"}, nil),
		versions: prometheus.NewDesc("mesh_nodes_by_version",
			"Nodes of the mesh by the version their latest heartbeat names (build label and short digest, as `meshctl nodes` shows it); none for a node never heard. The label is printable and at most 64 bytes; past the most common versions (20 by default) the rest count as other.",
			[]string{"version"}, nil),
		heartbeatAge: prometheus.NewDesc("mesh_node_heartbeat_age_seconds",
			"How long ago the broker stored each node's latest heartbeat, at the time of the fleet's read; nodes never heard are not in it.",
			nil, nil),
		problem: prometheus.NewDesc("mesh_node_problem",
			"1 for each node in a state that wants someone to look (silent, behind, failed, rolled back, disconnected, unreadable, expired), for alerting; at most 1,000 by default, by node name, the rest counted in mesh_node_problems_omitted.",
			[]string{"node", "state"}, nil),
		problemsOmitted: prometheus.NewDesc("mesh_node_problems_omitted",
			"Nodes in a problem state left out of mesh_node_problem by its bound (their counts are in mesh_nodes).",
			nil, nil),
		credentials: prometheus.NewDesc("mesh_node_credentials",
			"Stored node credentials by state: active, revoked (meshctl revoke, or enrolled again) or expired (not renewed in time).",
			[]string{"state"}, nil),
		waveNodes: prometheus.NewDesc("mesh_rollout_wave_nodes",
			"Nodes of a rollout by wave and step (pending, pushed, converged, unchanged, failed, reverted, deferred), for the active rollout and the latest few; waves past the first 50 count together as wave=\"rest\".",
			[]string{"rollout", "wave", "step"}, nil),
		rolloutState: prometheus.NewDesc("mesh_rollout_state",
			"1 for the state a rollout is in (running, paused, halted, done, aborted), 0 for the others; active is 1 for the mesh's active rollout.",
			[]string{"rollout", "kind", "state", "active"}, nil),
		rolloutWave: prometheus.NewDesc("mesh_rollout_current_wave",
			"The first wave of a rollout with a node not yet done with (0 is the canaries; a halted rollout names the wave it would go on with); -1 when every node is done with.",
			[]string{"rollout"}, nil),
		rolloutCreated: prometheus.NewDesc("mesh_rollout_created_timestamp_seconds",
			"When a rollout was started, in seconds since the epoch.",
			[]string{"rollout"}, nil),
		snapshotTime: prometheus.NewDesc("mesh_fleet_snapshot_timestamp_seconds",
			"When the fleet's series were read from the mesh, in seconds since the epoch: a scrape reuses a read for a few seconds, and a read that fails leaves the previous one served.",
			nil, nil),
		snapshotDuration: prometheus.NewDesc("mesh_fleet_snapshot_duration_seconds",
			"How long the read behind the fleet's series took.",
			nil, nil),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mesh_fleet_snapshot_errors_total",
			Help: "Reads of the fleet's series from the mesh that failed (timed out, or the broker refused); the previous read is served meanwhile.",
		}),
	}
	f.cache = &snapshotCache{read: f.read, maxAge: m.cfg.MaxAge, now: m.cfg.Now, failed: func(err error) {
		f.readErrors.Inc()
		m.cfg.Log.Warn("metrics: reading the fleet", "err", err)
	}}
	return f
}

// Describe sends every series' description.
func (f *fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{f.nodes, f.versions, f.heartbeatAge, f.problem, f.problemsOmitted, f.credentials,
		f.waveNodes, f.rolloutState, f.rolloutWave, f.rolloutCreated, f.snapshotTime, f.snapshotDuration} {
		ch <- d
	}
	f.readErrors.Describe(ch)
}

// Collect sends the series of the latest snapshot, read again when it is
// older than MaxAge.
func (f *fleetCollector) Collect(ch chan<- prometheus.Metric) {
	s := f.cache.get()
	ch <- f.readErrors
	if s == nil {
		return // never read: no series rather than zeros that would say "no nodes"
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(f.snapshotTime, float64(s.at.UnixNano())/1e9)
	gauge(f.snapshotDuration, s.took.Seconds())
	for _, st := range allStates {
		gauge(f.nodes, float64(s.states[st]), st)
	}
	for st, n := range s.states {
		if !slices.Contains(allStates, st) {
			gauge(f.nodes, float64(n), st) // a state added to client after this list
		}
	}
	for v, n := range s.versions {
		gauge(f.versions, float64(n), v)
	}
	ch <- prometheus.MustNewConstHistogram(f.heartbeatAge, s.ageCount, s.ageSum, s.ageBuckets)
	for _, p := range s.problems {
		gauge(f.problem, 1, p.node, p.state)
	}
	gauge(f.problemsOmitted, float64(s.omitted))
	for _, st := range []string{"active", "revoked", "expired"} {
		gauge(f.credentials, float64(s.creds[st]), st)
	}
	for _, r := range s.rollouts {
		for _, st := range allRolloutStates {
			v := 0.0
			if r.state == st {
				v = 1
			}
			gauge(f.rolloutState, v, r.id, r.kind, string(st), strconv.FormatBool(r.active))
		}
		gauge(f.rolloutWave, float64(r.current), r.id)
		gauge(f.rolloutCreated, float64(r.created.Unix()), r.id)
		for w, counts := range r.waves {
			for _, step := range allSteps {
				gauge(f.waveNodes, float64(counts[step]), r.id, strconv.Itoa(w), string(step))
			}
		}
		if r.rest != nil {
			for _, step := range allSteps {
				gauge(f.waveNodes, float64(r.rest[step]), r.id, "rest", string(step))
			}
		}
	}
}

// read reads the fleet: the nodes (client.Nodes, five sources at once)
// and the rollouts shown, within the configured timeout.
func (f *fleetCollector) read() (*snapshot, error) {
	cfg := f.m.cfg
	c := f.m.c
	if c == nil {
		return nil, errors.New("no connection to the mesh")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	s := &snapshot{at: cfg.Now()}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("the nodes: %w", err)
	}
	f.countNodes(s, nodes, cfg.Now())
	if s.rollouts, err = f.readRollouts(ctx); err != nil {
		return nil, fmt.Errorf("the rollouts: %w", err)
	}
	s.took = cfg.Now().Sub(s.at)
	return s, nil
}

// countNodes fills s from nodes, as of now.
func (f *fleetCollector) countNodes(s *snapshot, nodes []client.NodeStatus, now time.Time) {
	cfg := f.m.cfg
	s.states, s.creds = map[string]int{}, map[string]int{}
	s.ageBuckets = make(map[float64]uint64, len(heartbeatAgeBuckets))
	for _, b := range heartbeatAgeBuckets {
		s.ageBuckets[b] = 0
	}
	versions := map[string]int{}
	for _, n := range nodes { // sorted by name: the problems kept are the first by name
		s.states[n.State]++
		versions[versionOf(n)]++
		if !n.Heard.IsZero() {
			age := max(now.Sub(n.Heard).Seconds(), 0) // the broker's clock may run ahead
			s.ageCount++
			s.ageSum += age
			for _, b := range heartbeatAgeBuckets {
				if age <= b {
					s.ageBuckets[b]++
				}
			}
		}
		if slices.Contains(problemStates, n.State) {
			// Every source names nodes by checked names but the
			// credentials, whose records only the control plane writes;
			// a label is checked all the same.
			if len(s.problems) < cfg.MaxProblemNodes && linkproto.ValidName(n.Node) == nil {
				s.problems = append(s.problems, problem{n.Node, n.State})
			} else {
				s.omitted++
			}
		}
		if cr := n.Credential; cr != nil {
			switch {
			case !cr.Revoked.IsZero():
				s.creds["revoked"]++
			case !now.Before(cr.Expires):
				s.creds["expired"]++
			default:
				s.creds["active"]++
			}
		}
	}
	s.versions = boundVersions(versions, cfg.MaxVersions)
}

// versionOf is the version label of n: what its latest heartbeat names,
// made printable and cut to maxVersionBytes.
func versionOf(n client.NodeStatus) string {
	hb := n.Heartbeat
	if hb == nil {
		return versionNone
	}
	v := linkproto.FitPrintable(client.VersionLabel(hb.Build, hb.Version), maxVersionBytes)
	if v == "" {
		return versionNone
	}
	return v
}

// boundVersions keeps the max most common versions (ties by name, so a
// scrape shows the same ones as the last) and counts the rest as other:
// however many versions nodes make up, the series are at most max+1.
func boundVersions(counts map[string]int, max int) map[string]int {
	if len(counts) <= max {
		return counts
	}
	keys := make([]string, 0, len(counts))
	for v := range counts {
		keys = append(keys, v)
	}
	slices.SortFunc(keys, func(a, b string) int {
		return cmp.Or(counts[b]-counts[a], strings.Compare(a, b))
	})
	out := make(map[string]int, max+1)
	for i, v := range keys {
		if i < max && v != versionOther {
			out[v] = counts[v]
		} else {
			out[versionOther] += counts[v]
		}
	}
	return out
}

// readRollouts reads the active rollout and the latest MaxRollouts: their
// IDs from the bucket's keys, then those records alone.
func (f *fleetCollector) readRollouts(ctx context.Context) ([]rolloutView, error) {
	cfg := f.m.cfg
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, err
	}
	rs, err := store.New(js).Rollouts(ctx, cfg.Mesh)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil // a control service still making its buckets
	}
	if err != nil {
		return nil, err
	}
	ids, err := rs.IDs(ctx)
	if err != nil {
		return nil, err
	}
	active, err := rs.ActiveID(ctx)
	if err != nil {
		return nil, err
	}
	slices.Sort(ids) // rollout.NewID: by when each was created
	if len(ids) > cfg.MaxRollouts {
		ids = ids[len(ids)-cfg.MaxRollouts:]
	}
	if active != "" && !slices.Contains(ids, active) {
		ids = append(ids, active)
	}
	var out []rolloutView
	for _, id := range ids {
		r, err := rs.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if r == nil || linkproto.ValidName(r.ID) != nil {
			continue // gone since the listing, or not a rollout's record
		}
		out = append(out, viewOf(r, r.ID == active && r.State.Active(), cfg.MaxWaves))
	}
	return out, nil
}

// viewOf counts r's nodes by wave and step.
func viewOf(r *rollout.Rollout, active bool, maxWaves int) rolloutView {
	v := rolloutView{id: r.ID, kind: r.Kind, state: r.State, active: active, created: r.Created, current: r.CurrentWave()}
	if v.kind != rollout.KindProfiles && v.kind != rollout.KindRelease {
		v.kind = "other"
	}
	waves := min(r.Waves(), maxWaves)
	v.waves = make([]map[rollout.Step]int, waves)
	for i := range v.waves {
		v.waves[i] = map[rollout.Step]int{}
	}
	for _, n := range r.Nodes {
		step := n.Step
		if !slices.Contains(allSteps, step) {
			continue // a step this build does not know is not a label
		}
		switch {
		case n.Wave < 0:
		case n.Wave < waves:
			v.waves[n.Wave][step]++
		default:
			if v.rest == nil {
				v.rest = map[rollout.Step]int{}
			}
			v.rest[step]++
		}
	}
	return v
}
