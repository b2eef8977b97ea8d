package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

func TestNodes(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	c := b.client(now)
	declare := func(node string, revision uint64) {
		t.Helper()
		if err := c.Declare(ctx, &bytes.Buffer{}, node, decl(t, node, revision, "x"), DeclareOptions{PushTimeout: 50 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	declare("ok-1", 2)
	declare("behind", 2)
	declare("behind", 3)
	declare("never", 1)
	minute := linkproto.Duration(time.Minute)
	b.node("ok-1").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now.Add(-30 * time.Second), Interval: minute, Desired: 2, Applied: 2, Result: event.ResultConverged, Owned: 4, Drifted: 1})
	b.node("behind").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now.Add(-time.Second), Interval: minute, Desired: 2, Applied: 2})
	// Three intervals of a second are long past.
	b.node("silent").heartbeat(t, linkproto.Heartbeat{Version: "v0", Sent: now.Add(-4 * time.Second), Interval: linkproto.Duration(time.Second), Applied: 0})
	// Just within three intervals is not silence.
	b.node("late").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now.Add(-3 * time.Minute), Interval: minute})
	// Credentials as enrolment and revoke record them.
	record := func(rec store.NodeCredential) {
		t.Helper()
		if _, err := b.kv(linkproto.NodesBucket).Put(ctx, store.Key(testMesh, rec.Node), mustJSON(rec)); err != nil {
			t.Fatal(err)
		}
	}
	record(store.NodeCredential{Node: "ok-1", Key: "U1", Expires: now.Add(720 * time.Hour)})
	record(store.NodeCredential{Node: "behind", Key: "U2", Expires: now.Add(-time.Hour)})
	record(store.NodeCredential{Node: "gone", Key: "U3", Expires: now.Add(time.Hour), Revoked: now.Add(-5 * time.Minute)})
	// Another mesh on the same broker is not this one's.
	other := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: "work", Node: "x", Sent: now}
	if err := b.nc.Publish(linkproto.HeartbeatSubject("work", "x"), linkproto.Marshal(other)); err != nil {
		t.Fatal(err)
	}

	var nodes []NodeStatus
	basetest.Eventually(t, 5*time.Second, func() error {
		var err error
		nodes, err = c.Nodes(ctx)
		if err != nil {
			return err
		}
		heard := 0
		for _, n := range nodes {
			if n.Heartbeat != nil {
				heard++
			}
		}
		if heard != 4 {
			return fmt.Errorf("%d heartbeats stored, want 4: %+v", heard, nodes)
		}
		return nil
	})
	// One node read alone is what the listing says of it.
	for _, n := range nodes {
		one, known, err := c.Node(ctx, n.Node)
		if err != nil || !known {
			t.Errorf("Node(%s): known %v, %v", n.Node, known, err)
		} else if a, b := mustJSON(one), mustJSON(n); !bytes.Equal(a, b) || !one.Heard.Equal(n.Heard) {
			t.Errorf("Node(%s) differs from Nodes:\n got %s\nwant %s", n.Node, a, b)
		}
	}
	if _, known, err := c.Node(ctx, "nosuch"); known || err != nil {
		t.Errorf("Node of a node the mesh does not know: known %v, %v", known, err)
	}
	if _, _, err := c.Node(ctx, "web-*"); err == nil {
		t.Error("Node of a wildcard: no error")
	}
	var got []string
	for _, n := range nodes {
		got = append(got, n.Node+"="+n.State)
	}
	want := "behind=expired gone=revoked late=ok never=never heard ok-1=ok silent=silent"
	if strings.Join(got, " ") != want {
		t.Errorf("states\n got %s\nwant %s", strings.Join(got, " "), want)
	}

	var out bytes.Buffer
	if err := printNodes(&out, nodes, now, false); err != nil {
		t.Fatal(err)
	}
	table := `NODE    VERSION  DESIRED  APPLIED  DRIFTED  FAILED  LAST HEARD  CREDENTIAL          LABELS  STATE
behind  v1       3        2        0        0       1s ago      expired 1h0m0s ago  -       expired
gone    -        -        -        -        -       -           revoked 5m0s ago    -       revoked
late    v1       -        0        0        0       3m0s ago    -                   -       ok
never   -        1        -        -        -       -           -                   -       never heard
ok-1    v1       2        2        1        0       30s ago     expires in 30d      -       ok
silent  v0       -        0        0        0       4s ago      -                   -       silent
6 nodes: 2 ok, 1 expired, 1 never heard, 1 revoked, 1 silent; versions: 3 v1, 2 -, 1 v0
`
	if out.String() != table {
		t.Errorf("table\n%s\nwant\n%s", out.String(), table)
	}

	out.Reset()
	if err := printNodes(&out, nodes, now, true); err != nil {
		t.Fatal(err)
	}
	// JSON lines: one node a line, each a whole JSON object.
	var decoded []NodeStatus
	for i, line := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
		var n NodeStatus
		if err := json.Unmarshal([]byte(line), &n); err != nil {
			t.Fatalf("nodes --json, line %d: %v\n%s", i+1, err, out.String())
		}
		decoded = append(decoded, n)
	}
	if len(decoded) != 6 {
		t.Fatalf("%d nodes in JSON, want 6:\n%s", len(decoded), out.String())
	}
	if first := decoded[0]; first.Node != "behind" || first.State != StateExpired || first.Desired != 3 || first.Heartbeat == nil || first.Heartbeat.Applied != 2 ||
		first.Credential == nil || !first.Credential.Expires.Equal(now.Add(-time.Hour)) {
		t.Errorf("first node in JSON: %+v", first)
	}
	if gone := decoded[1]; gone.Credential == nil || !gone.Credential.Revoked.Equal(now.Add(-5*time.Minute)) {
		t.Errorf("a revoked node in JSON: %+v", gone)
	}
}

func TestNodesEmpty(t *testing.T) {
	b := newBed(t)
	nodes, err := b.client(time.Now()).Nodes(context.Background())
	if err != nil || len(nodes) != 0 {
		t.Fatalf("nodes of an empty mesh: %v, %v", nodes, err)
	}
	var out bytes.Buffer
	if err := printNodes(&out, nodes, time.Now(), true); err != nil || out.String() != "" {
		t.Errorf("nodes --json of an empty mesh: %q, %v", out.String(), err)
	}
}

// A stored entry that does not read fails the listing, naming it, however
// many good entries are read beside it (they are decoded aside, in no
// order); a heartbeat that does not read lists its node as unreadable.
func TestNodesNamesWhatDoesNotRead(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	c := b.client(now)
	for i := range 300 {
		node := fmt.Sprintf("n-%03d", i)
		if _, err := c.prepare(ctx, node, decl(t, node, 1, "x")); err != nil {
			t.Fatal(err)
		}
		if _, err := b.kv(linkproto.NodesBucket).Put(ctx, store.Key(testMesh, node), mustJSON(store.NodeCredential{Node: node, Key: "U", Expires: now.Add(time.Hour)})); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.nc.Publish(linkproto.HeartbeatSubject(testMesh, "n-007"), []byte(`{"protocol":`)); err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		nodes, err := c.Nodes(ctx)
		if err != nil {
			return err
		}
		if len(nodes) != 300 || nodes[7].State != StateUnreadable || nodes[7].Problem == "" {
			return fmt.Errorf("%d nodes; n-007: %+v", len(nodes), nodes[min(7, len(nodes)-1)])
		}
		return nil
	})

	for _, damage := range []struct{ bucket, key, want string }{
		{linkproto.DesiredBucket, linkproto.DesiredKey(testMesh, "n-123"), "the stored desired state of n-123"},
		{linkproto.NodesBucket, store.Key(testMesh, "n-200"), "the credential " + store.Key(testMesh, "n-200")},
		{linkproto.LabelsBucket, store.Key(testMesh, "n-250"), "the labels " + store.Key(testMesh, "n-250")},
	} {
		kv := b.kv(damage.bucket)
		before, err := kv.Get(ctx, damage.key)
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, damage.key, []byte("{not json")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Nodes(ctx); err == nil || !strings.Contains(err.Error(), damage.want) {
			t.Errorf("%s damaged: Nodes = %v, want an error naming %q", damage.key, err, damage.want)
		}
		if before != nil {
			_, err = kv.Put(ctx, damage.key, before.Value())
		} else {
			err = kv.Delete(ctx, damage.key)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Nodes(ctx); err != nil {
		t.Errorf("every entry mended: %v", err)
	}
}

// A node read alone carries its labels and the broker's word on its
// connection, as the listing does; a node the mesh knows only by its
// labels is known.
func TestNodeAloneIsTheListing(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	now := time.Now()
	c := b.client(now)
	if err := c.Declare(ctx, &bytes.Buffer{}, "web-1", decl(t, "web-1", 1, "x"), DeclareOptions{PushTimeout: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Label(ctx, "web-1", "alice", []string{"role=web"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LabelNew(ctx, "db-1", "alice", []string{"role=db"}); err != nil {
		t.Fatal(err)
	}
	b.node("web-1").heartbeat(t, linkproto.Heartbeat{Version: "v1", Sent: now.Add(-time.Minute), Interval: linkproto.Duration(time.Minute), Desired: 1, Applied: 1})
	ps, err := c.store.Presences(ctx, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []NodeStatus
	basetest.Eventually(t, 5*time.Second, func() error {
		if _, err := ps.Record(ctx, store.Presence{Node: "web-1", Connected: false, At: time.Now(), Reason: "Client Closed"}); err != nil {
			return err
		}
		if nodes, err = c.Nodes(ctx); err != nil {
			return err
		}
		if len(nodes) != 2 || nodes[1].Presence == nil || nodes[1].State != StateDisconnected {
			return fmt.Errorf("nodes %+v", nodes)
		}
		return nil
	})
	for _, n := range nodes {
		one, known, err := c.Node(ctx, n.Node)
		if a, b := mustJSON(one), mustJSON(n); err != nil || !known || !bytes.Equal(a, b) {
			t.Errorf("Node(%s): known %v, %v\n got %s\nwant %s", n.Node, known, err, a, b)
		}
	}
}
