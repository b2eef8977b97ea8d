package link

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// planRequest is revision rev as a plan request signed by key.
func planRequest(rev uint64, sign func(*linkproto.PlanRequest) error) []byte {
	p := linkproto.PlanRequest(declaration(rev))
	p.Signer, p.Signature = "", ""
	if sign != nil {
		if err := sign(&p); err != nil {
			panic(err)
		}
	}
	return linkproto.Marshal(p)
}

// ask sends data as a plan request and returns the answer, retrying while
// the link's subscription is not yet known to the broker.
func (b *bed) ask(data []byte) linkproto.PlanAnswer {
	b.t.Helper()
	var m *nats.Msg
	eventually(b.t, "an answer to a plan request", func() bool {
		var err error
		m, err = b.nc.Request(linkproto.PlanSubject(testMesh, testNode), data, 5*time.Second)
		if err != nil && !errors.Is(err, nats.ErrNoResponders) {
			b.t.Fatalf("plan request: %v", err)
		}
		return err == nil
	})
	var a linkproto.PlanAnswer
	if err := linkproto.Decode(m.Data, linkproto.MaxPlanAnswerSize, &a); err != nil {
		b.t.Fatalf("plan answer: %v: %s", err, m.Data)
	}
	return a
}

// TestPlanRequestAnsweredOnlyWhenTheMeshSignedItForPlanning: the host
// plans a request the mesh signed for planning; one unsigned, signed by
// another key, signed as a push, or for another node never reaches it,
// and is refused with the reason and journaled as link.refused.
func TestPlanRequestAnsweredOnlyWhenTheMeshSignedItForPlanning(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	a := b.ask(planRequest(5, func(p *linkproto.PlanRequest) error { return p.Sign(testKey) }))
	if a.Refused != "" || a.Node != testNode || a.Revision != 5 || len(a.Steps) != 1 || a.Seq == 0 {
		t.Fatalf("got %+v, want revision 5 planned with one step and a seq", a)
	}
	if got := len(b.records(event.PlanAnswered)); got != 1 {
		t.Fatalf("got %d plan.answered records, want 1", got)
	}
	asPush := func(p *linkproto.PlanRequest) error {
		d := linkproto.Declaration(*p)
		err := d.Sign(testKey)
		p.Signer, p.Signature = d.Signer, d.Signature
		return err
	}
	for _, c := range []struct {
		name   string
		data   []byte
		reason string
	}{
		{"unsigned", planRequest(6, nil), "unsigned"},
		{"another key", planRequest(6, func(p *linkproto.PlanRequest) error { return p.Sign(otherKey) }), "does not trust"},
		{"a push's signature", planRequest(6, asPush), "bad signature"},
		{"another node", func() []byte {
			p := linkproto.PlanRequest(declaration(6))
			p.Node = "web-2"
			_ = p.Sign(testKey)
			return linkproto.Marshal(p)
		}(), "another node"},
		{"not JSON", []byte("plan everything"), "malformed"},
	} {
		a := b.ask(c.data)
		if a.Refused == "" || !strings.Contains(a.Refused, c.reason) || len(a.Steps) != 0 || a.Seq != 0 {
			t.Errorf("%s: got %+v, want refused: %s", c.name, a, c.reason)
		}
	}
	if got := len(b.records(event.PlanAnswered)); got != 1 {
		t.Errorf("got %d plan.answered records after the refusals, want still 1", got)
	}
	if got := len(b.records(event.LinkRefused)); got != 5 {
		t.Errorf("got %d link.refused records, want 5: one per refusal", got)
	}
	if got := len(b.records(event.DeclarationReceived)); got != 0 {
		t.Errorf("got %d declarations received from plan requests, want none", got)
	}
}

// TestPlanWhilePlanningIsBusy: one plan is made at a time; a request
// arriving meanwhile is answered busy at once, not queued.
func TestPlanWhilePlanningIsBusy(t *testing.T) {
	gate := make(chan struct{})
	b := newBed(t, func(b *bed, _ *Config) { b.host.planGate = gate })
	b.waitUp()
	signed := planRequest(5, func(p *linkproto.PlanRequest) error { return p.Sign(testKey) })
	first := make(chan linkproto.PlanAnswer, 1)
	go func() {
		m, err := b.nc.Request(linkproto.PlanSubject(testMesh, testNode), signed, wait)
		var a linkproto.PlanAnswer
		if err == nil {
			err = linkproto.Decode(m.Data, linkproto.MaxPlanAnswerSize, &a)
		}
		if err != nil {
			a.Refused = err.Error()
		}
		first <- a
	}()
	eventually(t, "the first plan is being made", func() bool { return len(b.link.planning) == 1 })
	a := b.ask(signed)
	if !a.Busy || !strings.Contains(a.Refused, "busy") {
		t.Errorf("while planning: got %+v, want busy", a)
	}
	close(gate)
	if a := <-first; a.Refused != "" || len(a.Steps) != 1 {
		t.Errorf("the first plan: got %+v, want answered", a)
	}
	if a := b.ask(signed); a.Refused != "" {
		t.Errorf("after the first plan: got %+v, want answered", a)
	}
}

// TestPlanRequestsAreRateLimited: a signed request replayed over and over
// is planned, and journaled, plansPerMinute times a minute; the rest are
// answered busy and journal nothing.
func TestPlanRequestsAreRateLimited(t *testing.T) {
	b := newBed(t, nil)
	b.waitUp()
	signed := planRequest(5, func(p *linkproto.PlanRequest) error { return p.Sign(testKey) })
	busy := 0
	for range plansPerMinute + 5 {
		if a := b.ask(signed); a.Busy {
			busy++
		}
	}
	if busy != 5 {
		t.Errorf("got %d busy answers to %d requests, want 5", busy, plansPerMinute+5)
	}
	if got := len(b.records(event.PlanAnswered)); got != plansPerMinute {
		t.Errorf("got %d plan.answered records, want %d", got, plansPerMinute)
	}
}
