package fleetmetrics

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The nodes are counted by state and by version, as `meshctl nodes`
// shows them; the heartbeat ages make a histogram; the nodes in trouble
// are named, and the credentials counted by state.
func TestNodesByStateAndVersion(t *testing.T) {
	b := newBed(t)
	now := time.Now().UTC()
	for _, n := range []string{"web-1", "web-2"} {
		b.heartbeat(linkproto.Heartbeat{Node: n, Version: "sha256:" + strings.Repeat("0f", 32), Build: "v1", Sent: now, Desired: 1, Applied: 1, LastGood: 1})
	}
	b.heartbeat(linkproto.Heartbeat{Node: "db-1", Version: "sha256:" + strings.Repeat("ab", 32), Build: "v2", Sent: now,
		Desired: 2, Applied: 2, LastGood: 1, Failed: 3, Result: event.ResultFailed})
	b.heartbeat(linkproto.Heartbeat{Node: "db-2", Version: "v1", Sent: now.Add(-time.Hour)}) // silent
	b.heartbeat(linkproto.Heartbeat{Node: "gone", Version: "v1", Sent: now})
	b.credential(store.NodeCredential{Node: "gone", Key: "Ugone", Enrolled: now, Issued: now, Expires: now.Add(time.Hour), Revoked: now})
	b.credential(store.NodeCredential{Node: "web-1", Key: "Uweb1", Enrolled: now, Issued: now, Expires: now.Add(time.Hour)})
	b.credential(store.NodeCredential{Node: "old", Key: "Uold", Enrolled: now, Issued: now, Expires: now.Add(-time.Hour)})
	b.heartbeatsStored(5)

	m := b.metrics(Config{})
	mfs := scrape(t, m.Registry())
	want(t, mfs, 2, "mesh_nodes", "state=ok")
	want(t, mfs, 1, "mesh_nodes", "state=failed")
	want(t, mfs, 1, "mesh_nodes", "state=silent")
	want(t, mfs, 1, "mesh_nodes", "state=revoked")
	want(t, mfs, 1, "mesh_nodes", "state=expired")
	want(t, mfs, 0, "mesh_nodes", "state=behind")
	want(t, mfs, 2, "mesh_nodes_by_version", "version=v1 0f0f0f0f0f0f")
	want(t, mfs, 1, "mesh_nodes_by_version", "version=v2 abababababab")
	want(t, mfs, 2, "mesh_nodes_by_version", "version=v1")
	want(t, mfs, 1, "mesh_nodes_by_version", "version=none") // old: a credential, never heard

	want(t, mfs, 5, "mesh_node_heartbeat_age_seconds")
	h := mfs["mesh_node_heartbeat_age_seconds"].GetMetric()[0].GetHistogram()
	for _, bk := range h.GetBucket() {
		// The broker stored every heartbeat just now, whatever its Sent.
		if bk.GetUpperBound() == 60 && bk.GetCumulativeCount() != 5 {
			t.Errorf("heartbeats under a minute old: %d, want 5", bk.GetCumulativeCount())
		}
	}

	want(t, mfs, 1, "mesh_node_problem", "node=db-1", "state=failed")
	want(t, mfs, 1, "mesh_node_problem", "node=db-2", "state=silent")
	want(t, mfs, 1, "mesh_node_problem", "node=old", "state=expired")
	if n := len(mfs["mesh_node_problem"].GetMetric()); n != 3 {
		t.Errorf("%d problem series, want 3 (ok, revoked nodes are not problems)", n)
	}
	want(t, mfs, 0, "mesh_node_problems_omitted")

	want(t, mfs, 1, "mesh_node_credentials", "state=active")
	want(t, mfs, 1, "mesh_node_credentials", "state=revoked")
	want(t, mfs, 1, "mesh_node_credentials", "state=expired")

	// Past the bound, the rest of the problem nodes are counted.
	m = b.metrics(Config{MaxProblemNodes: 2})
	mfs = scrape(t, m.Registry())
	if n := len(mfs["mesh_node_problem"].GetMetric()); n != 2 {
		t.Errorf("%d problem series with a bound of 2", n)
	}
	want(t, mfs, 1, "mesh_node_problems_omitted")
}

// A node says what its version is: however many versions the nodes make
// up, and whatever bytes they hold, the series stay within the bound,
// printable and short.
func TestHostileVersionsAreBounded(t *testing.T) {
	b := newBed(t)
	now := time.Now().UTC()
	const nodes = 60
	for i := range nodes {
		v := fmt.Sprintf("evil\x00\x1b[31m-%d-%s", i, strings.Repeat("é\u202e", 100))
		b.heartbeat(linkproto.Heartbeat{Node: fmt.Sprintf("n-%02d", i), Version: v, Build: v, Sent: now})
	}
	b.heartbeatsStored(nodes)
	m := b.metrics(Config{MaxVersions: 10})
	mfs := scrape(t, m.Registry())
	series := mfs["mesh_nodes_by_version"].GetMetric()
	if len(series) > 11 {
		t.Errorf("%d version series; the bound is 10 and other", len(series))
	}
	total := 0.0
	for _, s := range series {
		v := s.GetLabel()[0].GetValue()
		total += s.GetGauge().GetValue()
		if len(v) > maxVersionBytes || !utf8.ValidString(v) || strings.IndexFunc(v, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
			t.Errorf("version label %q: over %d bytes, or not printable", v, maxVersionBytes)
		}
	}
	want(t, mfs, nodes-10, "mesh_nodes_by_version", "version=other")
	if total != nodes {
		t.Errorf("the version series count %v nodes, want %d", total, nodes)
	}
}

// A scrape storm reads the mesh once per MaxAge: the snapshot is reused.
func TestScrapesReuseTheSnapshot(t *testing.T) {
	b := newBed(t)
	now := time.Now().UTC()
	b.heartbeat(linkproto.Heartbeat{Node: "web-1", Version: "v1", Sent: now})
	b.heartbeatsStored(1)
	clock := now
	m := b.metrics(Config{MaxAge: 5 * time.Second, Now: func() time.Time { return clock }})
	first := scrape(t, m.Registry())
	want(t, first, 1, "mesh_nodes", "state=ok")
	b.heartbeat(linkproto.Heartbeat{Node: "web-2", Version: "v1", Sent: now})
	b.heartbeatsStored(2)
	want(t, scrape(t, m.Registry()), 1, "mesh_nodes", "state=ok") // within MaxAge: the same read
	clock = clock.Add(5 * time.Second)
	want(t, scrape(t, m.Registry()), 2, "mesh_nodes", "state=ok")

	// Scrapes at once share one read (run with -race).
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := m.Registry().Gather(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// The declarations the nodes journal are counted as the events stream
// stores them: a record sent again is counted once, and what is not a
// declaration's record of that node is not counted.
func TestDeclarationRecordsCounted(t *testing.T) {
	b := newBed(t)
	m := b.metrics(Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	events, err := b.js.Stream(context.Background(), linkproto.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 30*time.Second, func() error { // following from now on
		info, err := events.Info(context.Background())
		if err != nil {
			return err
		}
		if info.State.Consumers == 0 {
			return fmt.Errorf("no consumer yet")
		}
		return nil
	})
	publish := func(subject string, body []byte) {
		t.Helper()
		if err := b.nc.Publish(subject, body); err != nil {
			t.Fatal(err)
		}
	}
	record := func(node string, seq uint64, k event.Kind, p any) {
		t.Helper()
		r := event.New(k, 0, "", p)
		r.Seq, r.Time = seq, time.Now()
		body, err := linkproto.EventBody(r)
		if err != nil {
			t.Fatal(err)
		}
		publish(linkproto.EventSubject(testMesh, node, seq), body)
	}
	record("web-1", 1, event.DeclarationReceived, event.DeclarationReceivedPayload{Revision: 1, Source: "link:pushed"})
	record("web-1", 1, event.DeclarationReceived, event.DeclarationReceivedPayload{Revision: 1, Source: "link:pushed"}) // sent again
	record("web-1", 2, event.DeclarationRefused, event.DeclarationRefusedPayload{Revision: 2, Source: "link:pushed", Reason: "no"})
	record("web-2", 1, event.DeclarationReceived, event.DeclarationReceivedPayload{Revision: 1, Source: "link:reconnect"})
	record("web-2", 2, event.DeclarationRefused, event.DeclarationRefusedPayload{Source: "file:/srv/x.yaml", Reason: "no"})
	record("web-2", 3, event.ReconcileStarted, map[string]string{"kind": "declaration.received"})
	publish(linkproto.EventSubject(testMesh, "web-2", 4), []byte(`{"seq":5,"kind":"declaration.received","payload":{"source":"link:pushed"}}`)) // another record than its subject
	publish(linkproto.EventSubject(testMesh, "web-2", 6), []byte(`{"kind":"declaration.received", garbage`))
	record("web-3", 1, event.DeclarationReapplied, event.DeclarationReappliedPayload{Revision: 1, Source: "link:pushed"})

	basetest.Eventually(t, 30*time.Second, func() error {
		mfs := scrape(t, m.Registry())
		got := map[string]float64{}
		for _, s := range mfs["mesh_node_declarations_total"].GetMetric() {
			if v := s.GetCounter().GetValue(); v != 0 {
				got[labelsOf(s)] = v
			}
		}
		wantCounts := map[string]float64{
			"outcome=received,via=push":  1,
			"outcome=refused,via=push":   1,
			"outcome=received,via=link":  1,
			"outcome=refused,via=file":   1,
			"outcome=reapplied,via=push": 1,
		}
		if fmt.Sprint(got) != fmt.Sprint(wantCounts) {
			return fmt.Errorf("declarations counted %v, want %v", got, wantCounts)
		}
		return nil
	})
}
