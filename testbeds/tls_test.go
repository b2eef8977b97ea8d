package testbeds_test

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
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

// rogueDoc is what a rogue broker pushes: a setuid file.
const rogueDoc = `{"mesh":"home","node":"web-1","revision":99,"resources":[{"file":{"path":"/etc/rogue","content":"#!/bin/sh\n","mode":"4755"}}]}`

// TestRogueBrokerIsRefused: a server that answers at the node's broker
// address (the control service gone, its port taken) and pushes a setuid
// file is never linked to unless it proves itself with the mesh's CA for
// the name the node dials: the host journals why, and applies nothing.
func TestRogueBrokerIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// cert is the rogue's certificate; nil for none: no TLS.
		cert   func(t *testing.T, b *testbeds.Bed) *tls.Certificate
		reason string
	}{
		{"plaintext", func(*testing.T, *testbeds.Bed) *tls.Certificate { return nil }, "secure connection not available"},
		{"another CA", func(t *testing.T, _ *testbeds.Bed) *tls.Certificate {
			cert := testbeds.NewCA(t).Issue(t, "localhost", "127.0.0.1")
			return &cert
		}, "certificate signed by unknown authority"},
		{"the mesh's CA for another name", func(t *testing.T, b *testbeds.Bed) *tls.Certificate {
			cert := meshCA(t, b).Issue(t, "broker.example", "")
			return &cert
		}, "cannot validate certificate for 127.0.0.1 because it doesn't contain any IP SANs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := beds(t)
			h := b.AddHost("web-1")
			h.Start()
			testbeds.Eventually(t, 30*time.Second, "link.up", hasKind(h, event.LinkUp, 1))
			cert := tc.cert(t, b)
			b.Control.Stop()

			rogue := startRogue(t, b.Control.Listen, cert)
			pushFrom(t, rogue, cert != nil, func() error {
				recs, err := h.TryRecords()
				if err != nil {
					return err
				}
				for _, r := range recs {
					var p event.LinkPayload
					if r.Kind == event.LinkDown && json.Unmarshal(r.Payload, &p) == nil && strings.Contains(p.Reason, "refused the broker") {
						if !strings.Contains(p.Reason, tc.reason) {
							return testbeds.Fatal(fmt.Errorf("link.down says %q, want %q in it", p.Reason, tc.reason))
						}
						return nil
					}
				}
				return errors.New("no link.down refusing the broker yet")
			})
			for _, r := range h.Records() {
				switch r.Kind {
				case event.DeclarationReceived, event.DeclarationRefused, event.LinkRefused:
					t.Errorf("the rogue's push reached the host: %s %s", r.Kind, r.Payload)
				}
			}
			if n := len(kindsOf(h.Records(), event.LinkUp)); n != 1 {
				t.Errorf("%d link.up records, want the first one only", n)
			}
			if _, err := os.Stat(filepath.Join(h.Root, "etc/rogue")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("/etc/rogue: %v, want it absent", err)
			}
			if !strings.Contains(h.Log(), "refused the broker") {
				t.Error("the host's log does not say it refused the broker")
			}
		})
	}
}

// TestPlaintextOnlyWhenLinkJSONSaysSo: a link.json with a plaintext URL
// and no CA is refused at start; with allow_plaintext it links (and then
// whatever answers there is obeyed, which is why every start says so in
// the log and the journal).
func TestPlaintextOnlyWhenLinkJSONSaysSo(t *testing.T) {
	b := beds(t)
	h := b.AddHost("web-1")
	plain := startRogue(t, "127.0.0.1:0", nil)
	url := plain.ClientURL()
	writeLinkJSON(t, h, map[string]any{"mesh": "home", "node": "web-1", "urls": []string{url}})
	if r := h.Run("serve"); r.Code != 2 || !strings.Contains(r.Stderr, "names no ca_file: nothing would authenticate the broker at "+url) {
		t.Fatalf("serve with a plaintext link.json: %s", r)
	}

	writeLinkJSON(t, h, map[string]any{"mesh": "home", "node": "web-1", "urls": []string{url}, "allow_plaintext": true})
	for start := 1; start <= 2; start++ {
		h.Start()
		testbeds.Eventually(t, 30*time.Second, "link.up", hasKind(h, event.LinkUp, start))
		if n := len(kindsOf(h.Records(), event.LinkPlaintext)); n != start {
			t.Errorf("start %d: %d link.plaintext records", start, n)
		}
		if n := strings.Count(h.Log(), `level=WARN msg="the link runs without TLS"`); n != start {
			t.Errorf("start %d: the log warns %d times", start, n)
		}
		h.Stop()
	}
}

func writeLinkJSON(t *testing.T, h *testbeds.Host, cfg map[string]any) {
	t.Helper()
	// The mesh's signing key stays what enrolment wrote: these tests are
	// about the broker, not the declarations.
	var enrolled struct {
		SigningKey string `json:"signing_key"`
	}
	old, err := os.ReadFile(filepath.Join(h.StateDir, "link.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(old, &enrolled); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg["signing_key"]; !ok {
		cfg["signing_key"] = enrolled.SigningKey
	}
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(h.StateDir, "link.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func hasKind(h *testbeds.Host, k event.Kind, n int) func() error {
	return func() error {
		recs, err := h.TryRecords()
		if err != nil {
			return err
		}
		if got := len(kindsOf(recs, k)); got < n {
			return fmt.Errorf("%d %s records, want %d", got, k, n)
		}
		return nil
	}
}

func kindsOf(recs []event.Record, k event.Kind) []event.Record {
	var out []event.Record
	for _, r := range recs {
		if r.Kind == k {
			out = append(out, r)
		}
	}
	return out
}

// startRogue starts a NATS server with no authentication at all at addr,
// TLS only with cert when cert is not nil.
func startRogue(t *testing.T, addr string, cert *tls.Certificate) *server.Server {
	t.Helper()
	host, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{Host: host, Port: port, MaxPayload: linkproto.MaxDeclarationSize}
	if cert != nil {
		opts.TLS, opts.TLSConfig = true, &tls.Config{Certificates: []tls.Certificate{*cert}}
	}
	return basetest.NATS(t, opts)
}

// pushFrom pushes the rogue declaration to web-1 from rogue until done
// says the host has had its chance.
func pushFrom(t *testing.T, rogue *server.Server, useTLS bool, done func() error) {
	t.Helper()
	var opts []nats.Option
	if useTLS {
		opts = append(opts, nats.Secure(&tls.Config{InsecureSkipVerify: true}))
	}
	nc, err := nats.Connect(strings.Replace(rogue.ClientURL(), "tls://", "nats://", 1), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	push := linkproto.Marshal(linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testbeds.Mesh, Node: "web-1", Revision: 99, Document: json.RawMessage(rogueDoc)})
	testbeds.Eventually(t, 60*time.Second, "the host refuses the rogue", func() error {
		if err := nc.Publish(linkproto.DeclarationSubject(testbeds.Mesh, "web-1"), push); err != nil {
			return testbeds.Fatal(err)
		}
		return done()
	})
}

// meshCA reads the bed's CA and its key from the control's data directory:
// what an attacker who stole it would hold.
func meshCA(t *testing.T, b *testbeds.Bed) *testbeds.CA {
	t.Helper()
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(b.Control.DataDir, name))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := pem.Decode(data)
		return p.Bytes
	}
	cert, err := x509.ParseCertificate(read("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	key, err := x509.ParsePKCS8PrivateKey(read("ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	return &testbeds.CA{Cert: cert, Key: key.(crypto.Signer)}
}
