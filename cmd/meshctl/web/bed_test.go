package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/meshtest"
	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/projector"
)

const testMesh = "home"

// bed is the web view of one mesh on a real embedded broker, with no
// control service: the nodes are connections that publish what a host
// publishes (records, a report, heartbeats) with their own credentials.
type bed struct {
	t     testing.TB
	a     *authority.Authority
	url   string
	nc    *nats.Conn
	js    jetstream.JetStream
	c     *client.Client
	srv   *httptest.Server
	token string
}

func newBed(t testing.TB) *bed {
	t.Helper()
	m := meshtest.Start(t, testMesh)
	a, nc, js := m.A, m.Conn, m.JS
	c, err := client.NewClient(nc, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	c.Key, c.Operator = a.DeclarationKey(), "tester@bed"
	v, err := a.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	view, err := New(Config{Client: c, Mesh: testMesh, Tokens: v})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(view)
	t.Cleanup(srv.Close)
	tok, _, err := a.IssueWebToken("alice@ops", time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &bed{t: t, a: a, url: m.URL, nc: nc, js: js, c: c, srv: srv, token: tok}
}

// get asks for path as a browser logged in does, and returns the status
// and the body.
func (b *bed) get(path string) (int, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodGet, b.srv.URL+path, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/json")
	req.AddCookie(&http.Cookie{Name: cookieName, Value: b.token})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// fakeNode is a connection with a node's credentials, signed as an
// enrolment signs them.
type fakeNode struct {
	b    *bed
	name string
	nc   *nats.Conn
	recs []event.Record
}

func (b *bed) node(name string) *fakeNode {
	b.t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		b.t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	token, _, err := b.a.NodeJWT(name, pub, time.Now(), time.Hour)
	if err != nil {
		b.t.Fatal(err)
	}
	creds, err := jwt.FormatUserConfig(token, seed)
	if err != nil {
		b.t.Fatal(err)
	}
	dir := b.t.TempDir()
	credsFile, caFile := filepath.Join(dir, name+".creds"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(credsFile, creds, 0o600); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(caFile, b.a.CAPEM(), 0o600); err != nil {
		b.t.Fatal(err)
	}
	nc, err := nats.Connect(b.url, nats.UserCredentials(credsFile), nats.RootCAs(caFile),
		nats.CustomInboxPrefix(linkproto.InboxPrefix(testMesh, name)))
	if err != nil {
		b.t.Fatalf("node %s connects: %v", name, err)
	}
	b.t.Cleanup(nc.Close)
	return &fakeNode{b: b, name: name, nc: nc}
}

// journal appends records as the host's journal does (numbered from 1,
// timed now), publishes them upward, and returns them.
func (n *fakeNode) journal(recs ...event.Record) []event.Record {
	t := n.b.t
	t.Helper()
	for _, r := range recs {
		r.Seq = uint64(len(n.recs) + 1)
		if r.Time.IsZero() {
			r.Time = time.Now().UTC()
		}
		body, err := linkproto.EventBody(r)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.nc.Publish(linkproto.EventSubject(testMesh, n.name, r.Seq), body); err != nil {
			t.Fatal(err)
		}
		n.recs = append(n.recs, r)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return n.recs[len(n.recs)-len(recs):]
}

// report sends the projection of its records as its report, then a
// heartbeat naming it, running version of build, and waits for the
// streams to hold both.
func (n *fakeNode) report(version, build string) projector.State {
	t := n.b.t
	t.Helper()
	var s projector.State
	for _, r := range n.recs {
		s = projector.Fold(s, r)
	}
	now := time.Now()
	sent := linkproto.ReportOf(testMesh, n.name, s, now)
	msg := nats.NewMsg(linkproto.StateSubject(testMesh, n.name))
	msg.Data = sent.Body
	if sent.Encoding != "" {
		msg.Header.Set(linkproto.EncodingHeader, sent.Encoding)
	}
	if err := n.nc.PublishMsg(msg); err != nil {
		t.Fatal(err)
	}
	hb := linkproto.HeartbeatOf(s)
	hb.Mesh, hb.Node, hb.Version, hb.Build = testMesh, n.name, version, build
	hb.Report, hb.Sent, hb.Interval, hb.Acked = sent.Digest, now.UTC(), linkproto.Duration(time.Minute), s.Head
	if err := n.nc.Publish(linkproto.HeartbeatSubject(testMesh, n.name), linkproto.Marshal(hb)); err != nil {
		t.Fatal(err)
	}
	if err := n.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 10*time.Second, func() error {
		rep, err := n.b.c.Report(context.Background(), n.name)
		if err != nil {
			return err
		}
		if !rep.Current {
			return errNotYet
		}
		return nil
	})
	return s
}

// label stores node's labels as the labels bucket holds them, unchecked:
// what a page shows of them must not depend on their being checked.
func (b *bed) label(node string, set labels.Set) {
	b.t.Helper()
	kv, err := b.js.KeyValue(context.Background(), linkproto.LabelsBucket)
	if err != nil {
		b.t.Fatal(err)
	}
	rec, _ := json.Marshal(store.LabelRecord{Node: node, Labels: set, At: time.Now().UTC()})
	if _, err := kv.Put(context.Background(), store.Key(testMesh, node), rec); err != nil {
		b.t.Fatal(err)
	}
}

var errNotYet = errorString("the report is not the latest yet")

type errorString string

func (e errorString) Error() string { return string(e) }
