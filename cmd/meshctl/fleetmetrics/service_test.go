package fleetmetrics

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/cmd/meshctl/rollout"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
)

// serve runs a node service told of enrolments by m until the test ends.
func (b *bed) serve(m *Metrics) {
	b.t.Helper()
	sys, err := nodeservice.DialSystem(b.a, []string{b.url}, false, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(sys.Close)
	ready := make(chan struct{})
	s := &nodeservice.Service{Conn: b.nc, Mesh: testMesh, Key: b.a.DeclarationKey(), Log: b.log,
		Issuer: &nodeservice.Accounts{A: b.a, Sys: sys, Now: time.Now}, Enrolled: m.Enrolled,
		Ready: func() { close(ready) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.t.Errorf("service: %v", err)
		}
	})
	<-ready
}

// enrol presents token enc as mesh-host does, with a key made here:
// connected as the token's bootstrap user.
func (b *bed) enrol(enc string) error {
	tok, err := linkproto.ParseToken(enc)
	if err != nil {
		return err
	}
	tc, err := b.a.ClientTLS()
	if err != nil {
		return err
	}
	nc, err := nats.Connect(b.url, nats.Secure(tc),
		nats.UserJWT(func() (string, error) { return tok.Bootstrap, nil }, func([]byte) ([]byte, error) { return nil, nil }),
		nats.CustomInboxPrefix(linkproto.EnrolledPrefix(tok.Mesh, tok.ID)))
	if err != nil {
		return err
	}
	defer nc.Close()
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	ck, _ := nkeys.CreateCurveKeys()
	seal, _ := ck.PublicKey()
	req := linkproto.Enrol{Protocol: linkproto.ProtocolVersion, Token: enc, Key: pub, SealKey: seal, Nonce: linkproto.NewNonce()}
	m, err := nc.Request(linkproto.EnrolSubject(testMesh, tok.ID), linkproto.Marshal(req), 5*time.Second)
	if err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	var c linkproto.Credential
	if err := linkproto.Decode(m.Data, linkproto.MaxReportSize, &c); err != nil {
		return err
	}
	if c.Refused != "" {
		return errors.New(c.Refused)
	}
	return nil
}

// Enrolments are counted where the node service redeems a token: the
// first presentation is accepted, the same token again refused.
func TestEnrolmentsCounted(t *testing.T) {
	b := newBed(t)
	m := b.metrics(Config{})
	b.serve(m)
	enc, _, err := b.a.IssueToken("web-1", []string{b.url}, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.enrol(enc); err != nil {
		t.Fatalf("first enrolment: %v", err)
	}
	if err := b.enrol(enc); err == nil {
		t.Fatal("the token was redeemed twice")
	}
	mfs := scrape(t, m.Registry())
	want(t, mfs, 1, "mesh_enrolments_total", "result=accepted")
	want(t, mfs, 1, "mesh_enrolments_total", "result=refused")
	want(t, mfs, 1, "mesh_node_credentials", "state=active")
}

// fakeNodes answer pushes as their hosts would, each as told: accept,
// refuse, or (not listed) not answer at all.
type fakeNodes struct {
	mu      sync.Mutex
	answers map[string]string // node: "accept" or "refuse"
}

func (f *fakeNodes) set(answers map[string]string) {
	f.mu.Lock()
	f.answers = answers
	f.mu.Unlock()
}

func (b *bed) fakeNodes(nodes ...string) *fakeNodes {
	b.t.Helper()
	f := &fakeNodes{}
	for _, node := range nodes {
		sub, err := b.nc.Subscribe(linkproto.DeclarationSubject(testMesh, node), func(msg *nats.Msg) {
			f.mu.Lock()
			answer := f.answers[node]
			f.mu.Unlock()
			if answer == "" {
				return // offline: the push waits out its timeout
			}
			var d linkproto.Declaration
			if linkproto.Decode(msg.Data, linkproto.MaxDeclarationSize, &d) != nil {
				return
			}
			ack := linkproto.Ack{Protocol: linkproto.ProtocolVersion, Node: node, Revision: d.Revision, Accepted: answer == "accept"}
			if !ack.Accepted {
				ack.Reason = "refused by the test"
			}
			_ = msg.Respond(linkproto.Marshal(ack))
		})
		if err != nil {
			b.t.Fatal(err)
		}
		b.t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := b.nc.Flush(); err != nil {
		b.t.Fatal(err)
	}
	return f
}

// A rollout's waves show as it goes, a halted canary included, and the
// driver's pushes are counted by outcome.
func TestRolloutWavesAndPushes(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	c, err := client.NewClient(b.nc, testMesh)
	if err != nil {
		t.Fatal(err)
	}
	c.Key, c.Operator = b.a.DeclarationKey(), "tester@bed"
	for _, n := range []string{"web-1", "web-2", "web-3"} {
		if _, err := c.LabelNew(ctx, n, "tester@bed", []string{"role=web"}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := b.fakeNodes("web-1", "web-2", "web-3")
	nodes.set(map[string]string{"web-1": "refuse", "web-2": "refuse", "web-3": "refuse"})
	m := b.metrics(Config{})
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	d := &client.RolloutDriver{Conn: b.nc, Mesh: testMesh, Key: b.a.DeclarationKey(), Log: b.log, Pushed: m.Pushed}
	go func() { done <- d.Run(dctx) }()
	t.Cleanup(func() { cancel(); <-done })

	release := func(n byte) *drivers.ArchiveSpec {
		return &drivers.ArchiveSpec{Path: "/opt/mesh-host/${version}", Source: "file:///srv/r.tar",
			Digest: "sha256:" + strings.Repeat(string([]byte{n, n}), 32), Format: "tar"}
	}
	// The canary (web-1, first by name) refuses: the rollout halts there.
	r, err := c.StartRollout(ctx, rollout.Options{Selector: "role=web", Canary: 1, MaxInFlight: "1", Release: release('a')})
	if err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, time.Minute, func() error {
		mfs := scrape(t, m.Registry())
		if v, _ := value(mfs, "mesh_rollout_state", "active=false", "kind=release", "rollout="+r.ID, "state=halted"); v != 1 {
			return fmt.Errorf("rollout %s not shown halted", r.ID)
		}
		return nil
	})
	mfs := scrape(t, m.Registry())
	want(t, mfs, 1, "mesh_rollout_wave_nodes", "rollout="+r.ID, "step=failed", "wave=0")
	want(t, mfs, 0, "mesh_rollout_wave_nodes", "rollout="+r.ID, "step=pushed", "wave=0")
	want(t, mfs, 1, "mesh_rollout_wave_nodes", "rollout="+r.ID, "step=pending", "wave=1")
	want(t, mfs, 1, "mesh_rollout_wave_nodes", "rollout="+r.ID, "step=pending", "wave=2")
	want(t, mfs, 1, "mesh_rollout_current_wave", "rollout="+r.ID) // the first with a node not done with
	want(t, mfs, 1, "mesh_rollout_pushes_total", "outcome=refused")
	want(t, mfs, 0, "mesh_rollout_pushes_total", "outcome=accepted")

	// Then one of each outcome, in one wave: the active rollout shows.
	if _, err := c.SetRolloutState(ctx, r.ID, rollout.Aborted, "test"); err != nil {
		t.Fatal(err)
	}
	nodes.set(map[string]string{"web-1": "accept", "web-3": "refuse"}) // web-2 does not answer
	r2, err := c.StartRollout(ctx, rollout.Options{Selector: "role=web", Release: release('b'), WaitHealthy: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, time.Minute, func() error {
		mfs := scrape(t, m.Registry())
		for _, o := range []string{"accepted", "unanswered"} {
			if v, _ := value(mfs, "mesh_rollout_pushes_total", "outcome="+o); v != 1 {
				return fmt.Errorf("%s pushes: %v, want 1", o, v)
			}
		}
		return nil
	})
	mfs = scrape(t, m.Registry())
	want(t, mfs, 2, "mesh_rollout_pushes_total", "outcome=refused")
	want(t, mfs, 1, "mesh_rollout_state", "active=true", "kind=release", "rollout="+r2.ID, "state=running")
	want(t, mfs, 1, "mesh_rollout_state", "active=false", "kind=release", "rollout="+r.ID, "state=aborted")
	basetest.Eventually(t, time.Minute, func() error {
		mfs := scrape(t, m.Registry())
		for _, step := range []string{"pushed", "failed", "deferred"} {
			if v, _ := value(mfs, "mesh_rollout_wave_nodes", "rollout="+r2.ID, "step="+step, "wave=0"); v != 1 {
				return fmt.Errorf("wave 0 %s: %v, want 1", step, v)
			}
		}
		return nil
	})
}
