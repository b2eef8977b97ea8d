package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// BenchmarkNodes10000: `meshctl nodes --json` as the command reads and
// prints it (Client.Nodes, then PrintNodes) over 10,000 nodes, each with
// a heartbeat, a stored declaration, a credential and labels, on an
// embedded broker with no hosts: the listing's own cost, apart from a
// fleet's load on the machine (BenchmarkFleet in testbeds measures it
// with one).
func BenchmarkNodes10000(b *testing.B) {
	const nodes = 10_000
	bed := newBed(b)
	ctx := context.Background()
	c, err := NewClient(bed.nc, testMesh)
	if err != nil {
		b.Fatal(err)
	}
	c.Key, c.Operator = bed.a.DeclarationKey(), "bench"
	creds, err := bed.js.KeyValue(ctx, linkproto.NodesBucket)
	if err != nil {
		b.Fatal(err)
	}
	ls, err := bed.js.KeyValue(ctx, linkproto.LabelsBucket)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	sem := make(chan struct{}, 64)
	for i := range nodes {
		node := fmt.Sprintf("node-%05d", i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := seedNode(ctx, c, creds, ls, node, now); err != nil {
				errs <- fmt.Errorf("%s: %w", node, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	// Every heartbeat stored before the first listing.
	basetest.Eventually(b, time.Minute, func() error {
		s, err := bed.js.Stream(ctx, linkproto.HeartbeatsStream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs < nodes {
			return fmt.Errorf("%d of %d heartbeats stored", info.State.Msgs, nodes)
		}
		return nil
	})
	for b.Loop() {
		got, err := c.Nodes(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != nodes {
			b.Fatalf("%d nodes listed, want %d", len(got), nodes)
		}
		if err := printNodes(io.Discard, got, now, true); err != nil {
			b.Fatal(err)
		}
	}
}

// seedNode stores what the control plane holds for a node of a fleet.
func seedNode(ctx context.Context, c *Client, creds, ls interface {
	Put(context.Context, string, []byte) (uint64, error)
}, node string, now time.Time) error {
	src := fmt.Sprintf("mesh: %s\nnode: %s\nrevision: 1\nresources:\n  - file: {path: /etc/motd, content: \"held by the mesh\\n\"}\n  - file: {path: /etc/app.conf, content: \"listen 8080\\n\", mode: \"0640\"}\n", testMesh, node)
	d, err := declaration.ParseYAML(node+".yaml", []byte(src))
	if err != nil {
		return err
	}
	if _, err := c.prepare(ctx, node, d); err != nil {
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
	hb := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: node, Version: "sha256:0f4e5a1c9d2b", Build: "bed",
		Sent: now, Interval: linkproto.Duration(time.Minute), Desired: 1, Applied: 1, LastGood: 1, Owned: 2, Head: 40, Acked: 40, Uptime: linkproto.Duration(time.Hour),
		KnownGood: "sha256:0f4e5a1c9d2b", Report: "sha256:5b1c"}
	return c.Conn.Publish(linkproto.HeartbeatSubject(testMesh, node), linkproto.Marshal(hb))
}
