package fleetmetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/meshtest"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
)

const testMesh = "home"

// bed is one mesh on a real embedded broker: its authority, a
// control-user connection with the streams and buckets in place (as the
// node service makes them), and no hosts: what the control plane stores
// of them is written as they would.
type bed struct {
	t   testing.TB
	a   *authority.Authority
	url string
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger
}

func newBed(t testing.TB) *bed {
	t.Helper()
	m := meshtest.Start(t, testMesh)
	return &bed{t: t, a: m.A, url: m.URL, nc: m.Conn, js: m.JS, log: m.Log}
}

// heartbeat publishes hb as node's latest, as its host would.
func (b *bed) heartbeat(hb linkproto.Heartbeat) {
	b.t.Helper()
	hb.Protocol, hb.Mesh = linkproto.ProtocolVersion, testMesh
	if hb.Interval == 0 {
		hb.Interval = linkproto.Duration(time.Minute)
	}
	if err := b.nc.Publish(linkproto.HeartbeatSubject(testMesh, hb.Node), linkproto.Marshal(hb)); err != nil {
		b.t.Fatal(err)
	}
}

// heartbeatsStored waits until the heartbeats stream holds n nodes'.
func (b *bed) heartbeatsStored(n uint64) {
	b.t.Helper()
	basetest.Eventually(b.t, time.Minute, func() error {
		s, err := b.js.Stream(context.Background(), linkproto.HeartbeatsStream)
		if err != nil {
			return err
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Msgs < n {
			return fmt.Errorf("%d of %d heartbeats stored", info.State.Msgs, n)
		}
		return nil
	})
}

// credential stores node's record of enrolment.
func (b *bed) credential(rec store.NodeCredential) {
	b.t.Helper()
	kv, err := b.js.KeyValue(context.Background(), linkproto.NodesBucket)
	if err != nil {
		b.t.Fatal(err)
	}
	data, _ := json.Marshal(rec)
	if _, err := kv.Put(context.Background(), store.Key(testMesh, rec.Node), data); err != nil {
		b.t.Fatal(err)
	}
}

// metrics is the fleet's metrics over the bed's connection, reading
// afresh at every scrape.
func (b *bed) metrics(cfg Config) *Metrics {
	cfg.Conn, cfg.Mesh, cfg.Log = b.nc, testMesh, b.log
	if cfg.MaxAge == 0 {
		cfg.MaxAge = time.Nanosecond
	}
	return New(cfg)
}

// scrape gathers reg as a Prometheus server would, and fails on an
// inconsistent registry.
func scrape(t testing.TB, reg prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if mf.GetHelp() == "" {
			t.Errorf("%s has no HELP", mf.GetName())
		}
		out[mf.GetName()] = mf
	}
	return out
}

// value is the value of name's series with exactly labels ("k=v"), and
// whether there is one.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	want := strings.Join(labels, ",")
	for _, m := range mf.GetMetric() {
		if labelsOf(m) != want {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

// labelsOf is m's labels as "k=v,k=v", sorted by key.
func labelsOf(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	sort.Strings(ls)
	return strings.Join(ls, ",")
}

// want fails unless name{labels} is v.
func want(t testing.TB, mfs map[string]*dto.MetricFamily, v float64, name string, labels ...string) {
	t.Helper()
	got, ok := value(mfs, name, labels...)
	switch {
	case !ok:
		t.Errorf("%s{%s}: no such series", name, strings.Join(labels, ","))
	case got != v:
		t.Errorf("%s{%s} = %v, want %v", name, strings.Join(labels, ","), got, v)
	}
}
