package fleetmetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// BenchmarkScrape: one scrape of the registry, encoded as the text
// exposition format, over a fleet of 1,000 and 10,000 nodes each with a
// heartbeat, a stored declaration, a credential and labels, and a finished
// rollout of every node, on an embedded broker with no hosts (stored
// heartbeats, as BenchmarkNodes10000 in package client): the scrape's own
// cost, apart from a fleet's load on the machine. "fresh" reads the mesh
// at every scrape (what a scrape costs once every MaxAge); "cached"
// serves the snapshot (what every other scrape costs).
func BenchmarkScrape(b *testing.B) {
	for _, nodes := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			bed := newBed(b)
			seedFleet(b, bed, nodes)
			for _, mode := range []string{"fresh", "cached"} {
				b.Run(mode, func(b *testing.B) {
					cfg := Config{Timeout: time.Minute}
					if mode == "cached" {
						cfg.MaxAge = time.Hour
					}
					m := bed.metrics(cfg)
					scrapeText(b, m) // the cache filled, and the series checked
					b.ReportAllocs()
					for b.Loop() {
						scrapeText(b, m)
					}
				})
			}
		})
	}
}

// scrapeText gathers m and writes it as Prometheus's text format.
func scrapeText(b *testing.B, m *Metrics) {
	mfs, err := m.Registry().Gather()
	if err != nil {
		b.Fatal(err)
	}
	enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
	found := false
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			b.Fatal(err)
		}
		found = found || mf.GetName() == "mesh_nodes"
	}
	if !found {
		b.Fatal("no mesh_nodes series: the fleet was not read")
	}
}

// seedFleet stores what the control plane holds for a fleet of n nodes,
// and a done rollout over all of them in waves of a tenth.
func seedFleet(b *testing.B, bed *bed, n int) {
	ctx := context.Background()
	st := store.New(bed.js)
	desired, err := st.Desired(ctx, testMesh)
	if err != nil {
		b.Fatal(err)
	}
	creds, err := bed.js.KeyValue(ctx, linkproto.NodesBucket)
	if err != nil {
		b.Fatal(err)
	}
	ls, err := bed.js.KeyValue(ctx, linkproto.LabelsBucket)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	names := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		node := fmt.Sprintf("node-%05d", i)
		names[i] = node
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := seedNode(ctx, bed, desired, creds, ls, node, i, now); err != nil {
				errs <- fmt.Errorf("%s: %w", node, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	bed.heartbeatsStored(uint64(n))
	nodes, _, err := rollout.PlanWaves(names, nil, 1, "10%")
	if err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		nodes[i].Step, nodes[i].Revision = rollout.StepConverged, 1
	}
	rs, err := st.Rollouts(ctx, testMesh)
	if err != nil {
		b.Fatal(err)
	}
	r := &rollout.Rollout{ID: rollout.NewID(now), Mesh: testMesh, Kind: rollout.KindProfiles, Selector: "role=web",
		Operator: "bench", Created: now, Updated: now, Canary: 1, State: rollout.Done, Nodes: nodes}
	if err := rs.Create(ctx, r); err != nil {
		b.Fatal(err)
	}
}

// seedNode stores node's declaration, credential and labels and publishes
// its heartbeat; one node in twenty is silent, one in fifty failed, and
// the versions are three.
func seedNode(ctx context.Context, bed *bed, desired *store.Desired, creds, ls interface {
	Put(context.Context, string, []byte) (uint64, error)
}, node string, i int, now time.Time) error {
	src := fmt.Sprintf("mesh: %s\nnode: %s\nrevision: 1\nresources:\n  - file: {path: /etc/motd, content: \"held by the mesh\\n\"}\n", testMesh, node)
	d, err := declaration.ParseYAML(node+".yaml", []byte(src))
	if err != nil {
		return err
	}
	push, err := client.Push(d, testMesh, node)
	if err != nil {
		return err
	}
	if err := desired.Create(ctx, node, push); err != nil {
		return err
	}
	cred, _ := json.Marshal(store.NodeCredential{Node: node, Key: "U" + node, Token: "t", Enrolled: now, Issued: now, Expires: now.Add(720 * time.Hour)})
	if _, err := creds.Put(ctx, store.Key(testMesh, node), cred); err != nil {
		return err
	}
	lab, _ := json.Marshal(store.LabelRecord{Node: node, Labels: labels.Set{"role": "web", "dc": "fra"}, At: now})
	if _, err := ls.Put(ctx, store.Key(testMesh, node), lab); err != nil {
		return err
	}
	hb := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: node, Version: fmt.Sprintf("sha256:%064d", i%3), Build: "bed",
		Sent: now, Interval: linkproto.Duration(time.Minute), Desired: 1, Applied: 1, LastGood: 1, Owned: 1, Head: 40, Acked: 40}
	switch {
	case i%20 == 0:
		hb.Sent = now.Add(-time.Hour)
	case i%50 == 1:
		hb.Result, hb.Failed, hb.LastGood = "failed", 1, 0
	}
	return bed.nc.Publish(linkproto.HeartbeatSubject(testMesh, node), linkproto.Marshal(hb))
}
