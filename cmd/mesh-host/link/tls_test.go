package link

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/testbeds"
)

// runTLSServer starts a broker serving TLS only with cert, and no
// authentication: the control plane's side of these tests and the rogue
// of the attacks alike.
func runTLSServer(t testing.TB, cert *tls.Certificate) *server.Server {
	t.Helper()
	opts := &server.Options{}
	if cert != nil {
		opts.TLS, opts.TLSConfig = true, &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12}
	}
	return basetest.NATS(t, opts)
}

// TestLinkUpOverTLS: a broker with a certificate from the mesh's CA for
// the name in the URL is linked to, whatever the URL's scheme.
func TestLinkUpOverTLS(t *testing.T) {
	ca := testbeds.NewCA(t)
	cert := ca.Issue(t, "localhost", "127.0.0.1")
	srv := runTLSServer(t, &cert)
	for _, url := range []string{"tls://127.0.0.1:%d", "nats://localhost:%d"} {
		j := openJournal(t, t.TempDir()+"/journal.db")
		b := &bed{t: t, j: j, host: &testHost{j: j}}
		b.start(Config{Mesh: testMesh, Node: testNode, Trust: publicKey(testKey), URLs: []string{fmt.Sprintf(url, serverPort(t, srv))}, TLS: ca.Client(),
			ReconnectMin: 20 * time.Millisecond, ReconnectMax: 100 * time.Millisecond, HelloTimeout: 100 * time.Millisecond})
		b.waitUp()
		b.stop()
	}
}

// TestRefusesAnUnprovenBroker: the attacks on the link. A server at the
// broker's address that does not prove itself with the mesh's CA for the
// name the link dialled is never linked to: the link journals why, as
// link.down, once, and nothing the server pushes reaches the host.
func TestRefusesAnUnprovenBroker(t *testing.T) {
	ca := testbeds.NewCA(t)
	otherCert := testbeds.NewCA(t).Issue(t, "localhost", "127.0.0.1")
	wrongName := ca.Issue(t, "broker.example", "")
	for _, tc := range []struct {
		name   string
		cert   *tls.Certificate // nil: no TLS at all
		reason string
	}{
		{"plaintext server", nil, "secure connection not available"},
		{"another CA", &otherCert, "certificate signed by unknown authority"},
		{"a name not in the URL", &wrongName, "certificate is valid for broker.example, not localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rogue := runTLSServer(t, tc.cert)
			url := fmt.Sprintf("tls://localhost:%d", serverPort(t, rogue))
			j := openJournal(t, t.TempDir()+"/journal.db")
			b := &bed{t: t, j: j, host: &testHost{j: j}}
			b.start(Config{Mesh: testMesh, Node: testNode, Trust: publicKey(testKey), URLs: []string{url}, TLS: ca.Client(),
				ReconnectMin: 20 * time.Millisecond, ReconnectMax: 50 * time.Millisecond, HelloTimeout: 100 * time.Millisecond})

			// The rogue pushes a declaration, again and again.
			pushOpts := []nats.Option{}
			if tc.cert != nil {
				pushOpts = append(pushOpts, nats.Secure(&tls.Config{InsecureSkipVerify: true}))
			}
			pusher, err := nats.Connect(strings.Replace(url, "tls://", "nats://", 1), pushOpts...)
			if err != nil {
				t.Fatal(err)
			}
			defer pusher.Close()
			push := linkproto.Marshal(linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testMesh, Node: testNode, Revision: 1, Document: []byte(`{"mesh":"lab","node":"web-1","revision":1,"resources":[]}`)})
			var downs []event.Record
			eventually(t, "the refusal journaled", func() bool {
				pusher.Publish(linkproto.DeclarationSubject(testMesh, testNode), push)
				downs = b.records(event.LinkDown)
				return len(downs) > 0
			})
			var p event.LinkPayload
			if err := json.Unmarshal(downs[0].Payload, &p); err != nil || !strings.Contains(p.Reason, tc.reason) || !strings.HasPrefix(p.Reason, "refused the broker: ") {
				t.Errorf("link.down %+v, %v; want a reason with %q", p, err, tc.reason)
			}
			// Retries go on; the same reason is not journaled again.
			time.Sleep(3 * failurePoll)
			b.stop()
			if n := len(b.records(event.LinkDown)); n != 1 {
				t.Errorf("%d link.down records, want 1", n)
			}
			if up := b.records(event.LinkUp); len(up) != 0 {
				t.Errorf("linked to the rogue: %+v", up)
			}
			if got := b.host.accepted(); len(got) != 0 {
				t.Errorf("the host was handed %d declarations from the rogue", len(got))
			}
		})
	}
}

// upSignal is a journal that says when a link.up is appended.
type upSignal struct {
	Journal
	up chan struct{}
}

func (u *upSignal) Append(recs ...event.Record) ([]event.Record, error) {
	out, err := u.Journal.Append(recs...)
	for _, r := range recs {
		if r.Kind == event.LinkUp {
			select {
			case u.up <- struct{}{}:
			default:
			}
		}
	}
	return out, err
}

// BenchmarkConnect is a host's connect time: from Run to link.up, over
// TLS with a certificate from the mesh's CA and over plaintext.
func BenchmarkConnect(b *testing.B) {
	ca := testbeds.NewCA(b)
	cert := ca.Issue(b, "localhost", "127.0.0.1")
	for _, bc := range []struct {
		name string
		srv  *server.Server
		tls  *tls.Config
	}{
		{"plaintext", runTLSServer(b, nil), nil},
		{"tls", runTLSServer(b, &cert), ca.Client()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			j := openJournal(b, b.TempDir()+"/journal.db")
			sig := &upSignal{Journal: j, up: make(chan struct{}, 1)}
			cfg := Config{Mesh: testMesh, Node: testNode, Trust: publicKey(testKey), URLs: []string{fmt.Sprintf("tls://127.0.0.1:%d", serverPort(b, bc.srv))},
				TLS: bc.tls, AllowPlaintext: bc.tls == nil, HeartbeatInterval: time.Hour, HelloTimeout: 100 * time.Millisecond}
			if bc.tls == nil {
				cfg.URLs[0] = strings.Replace(cfg.URLs[0], "tls://", "nats://", 1)
			}
			for b.Loop() {
				l, err := New(cfg, &testHost{j: j}, sig)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- l.Run(ctx) }()
				<-sig.up
				b.StopTimer()
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
