package client

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
)

// BenchmarkBrokerPublishCache measures what the broker holds for each node
// once the node has published on distinct subjects, as a host does: each
// journal record goes to a subject of its own (linkproto.EventSubject). A
// client with publish permissions has a cache in nats-server of every
// subject it published to and whether it may (client.perms.pcache, a
// sync.Map pruned at 128 entries), so a node that has published 128
// records or more holds a full one for as long as it is connected.
//
// Each node is a user with the host's permissions (linkproto.NodePublish,
// NodeSubscribe), on a plain connection to an embedded server: TLS and
// JetStream do not change this cache. The figure, kb/node, is the heap the
// server process gained from the publishes alone, collected, over the
// nodes; the baseline is subjects=1, a node publishing one subject.
//
//	go test ./cmd/meshctl/client -run '^$' -bench BrokerPublishCache -benchtime 1x
func BenchmarkBrokerPublishCache(b *testing.B) {
	const nodes = 1000
	for _, listen := range []bool{false, true} {
		for _, subjects := range []int{1, 30, 128, 500} {
			b.Run(fmt.Sprintf("listened=%v/subjects=%d", listen, subjects), func(b *testing.B) {
				var perNode float64
				for range b.N {
					perNode = publishCacheGrowth(b, nodes, subjects, listen)
				}
				b.ReportMetric(perNode/1024, "kb/node")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}

// publishCacheGrowth connects nodes users, has each publish on subjects
// distinct event subjects, and returns the heap gained per node.
func publishCacheGrowth(b *testing.B, nodes, subjects int, listen bool) float64 {
	b.Helper()
	const mesh = "bench"
	users := make([]*server.User, nodes, nodes+1)
	for i := range users {
		node := fmt.Sprintf("web-%05d", i)
		users[i] = &server.User{Username: node, Password: "x", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{linkproto.NodePublish(mesh, node)}},
			Subscribe: &server.SubjectPermission{Allow: []string{linkproto.NodeSubscribe(mesh, node)}},
		}}
	}
	users = append(users, &server.User{Username: "service", Password: "x"})
	s := basetest.NATS(b, &server.Options{Users: users})
	// What the events stream is to the broker: interest in every node's
	// records. With it, each publisher also keeps the subject's match
	// (client.in.results, up to 512 subjects, reset when the account's
	// subscriptions change).
	if listen {
		sc, err := nats.Connect(s.ClientURL(), nats.UserInfo("service", "x"))
		if err != nil {
			b.Fatal(err)
		}
		defer sc.Close()
		if _, err := sc.Subscribe(linkproto.NodeEvents(mesh, "*"), func(*nats.Msg) {}); err != nil {
			b.Fatal(err)
		}
		if err := sc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	conns := make([]*nats.Conn, nodes)
	for i := range conns {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(users[i].Username, "x"))
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		conns[i] = nc
	}
	before := collectedHeap()
	for i, nc := range conns[:nodes] {
		for seq := range subjects {
			if err := nc.Publish(linkproto.EventSubject(mesh, users[i].Username, uint64(seq+1)), []byte("{}")); err != nil {
				b.Fatal(err)
			}
			// Flushed in small groups, as records go up: a burst would
			// grow the connections' buffers instead, and measure those.
			if seq%8 == 7 {
				if err := nc.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	return float64(int64(collectedHeap())-int64(before)) / float64(nodes)
}

func collectedHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
