package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
)

// seedFleet stores what the control plane holds of a fleet of n nodes
// (node-00000 …): a heartbeat each, as the stream stores it, a credential
// and labels (role=web for the even, role=db for the odd), as
// client's BenchmarkNodes10000 does.
func seedFleet(tb testing.TB, b *bed, n int) {
	tb.Helper()
	ctx := context.Background()
	creds, err := b.js.KeyValue(ctx, linkproto.NodesBucket)
	if err != nil {
		tb.Fatal(err)
	}
	ls, err := b.js.KeyValue(ctx, linkproto.LabelsBucket)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().UTC()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 64)
	for i := range n {
		node := fmt.Sprintf("node-%05d", i)
		role := "web"
		if i%2 == 1 {
			role = "db"
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cred, _ := json.Marshal(store.NodeCredential{Node: node, Key: "U" + node, Token: "t", Enrolled: now, Issued: now, Expires: now.Add(720 * time.Hour)})
			if _, err := creds.Put(ctx, store.Key(testMesh, node), cred); err != nil {
				errs <- err
				return
			}
			lab, _ := json.Marshal(store.LabelRecord{Node: node, Labels: labels.Set{"role": role, "dc": "fra"}, At: now})
			if _, err := ls.Put(ctx, store.Key(testMesh, node), lab); err != nil {
				errs <- err
				return
			}
			hb := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: node, Version: "sha256:0f4e5a1c9d2b", Build: "bed",
				Sent: now, Interval: linkproto.Duration(time.Minute), Owned: 2, Head: 40, Acked: 40, Uptime: linkproto.Duration(time.Hour)}
			if err := b.nc.Publish(linkproto.HeartbeatSubject(testMesh, node), linkproto.Marshal(hb)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	basetest.Eventually(tb, time.Minute, func() error {
		s, err := b.js.Stream(ctx, linkproto.HeartbeatsStream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs < uint64(n) {
			return fmt.Errorf("%d of %d heartbeats stored", info.State.Msgs, n)
		}
		return nil
	})
}

// curveKey is a node's public sealing key, as enrolment presents it.
func curveKey(tb testing.TB) string {
	k, err := nkeys.CreateCurveKeys()
	if err != nil {
		tb.Fatal(err)
	}
	pub, _ := k.PublicKey()
	return pub
}

// BenchmarkFleetPage: the fleet page (its first page of 100 nodes, the
// counts and both pictures) over 1,000 and 10,000 stored nodes, asked for
// over HTTP as a browser does: first-byte-ms is the wait for its first
// byte, ns/op the whole page read.
func BenchmarkFleetPage(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			bed := newBed(b)
			seedFleet(b, bed, n)
			var first time.Duration
			for b.Loop() {
				req := bed.pageRequest("/")
				start := time.Now()
				req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
					GotFirstResponseByte: func() { first += time.Since(start) },
				}))
				readPage(b, req)
			}
			b.ReportMetric(float64(first.Milliseconds())/float64(b.N), "first-byte-ms")
		})
	}
}

// BenchmarkNodePage: one node's page among 1,000 and 10,000 stored nodes.
// The node has no records (the seeded fleet sends none): what is
// measured is what the page reads of the fleet to draw one node.
func BenchmarkNodePage(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			bed := newBed(b)
			seedFleet(b, bed, n)
			for b.Loop() {
				readPage(b, bed.pageRequest("/nodes/node-00042"))
			}
		})
	}
}

// pageRequest asks for path as the operator's browser does.
func (bed *bed) pageRequest(path string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, bed.srv.URL+path, nil)
	req.Header.Set("Accept", "text/html")
	req.AddCookie(&http.Cookie{Name: cookieName, Value: bed.token})
	return req
}

// readPage reads the whole answer to req, which must be a page.
func readPage(b *testing.B, req *http.Request) {
	b.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	size, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || size == 0 {
		b.Fatalf("%s, %d bytes: %v", resp.Status, size, err)
	}
}
