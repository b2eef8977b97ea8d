package service

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

func planRequest(rev uint64, doc string) *linkproto.PlanRequest {
	p := linkproto.PlanRequest(*linkprototest.Push(rev, doc))
	return &p
}

func plans(t *testing.T, j *journal.Journal) []event.PlanAnsweredPayload {
	t.Helper()
	var out []event.PlanAnsweredPayload
	if err := j.Scan(1, 0, func(r event.Record) error {
		if r.Kind == event.PlanAnswered {
			var p event.PlanAnsweredPayload
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				return err
			}
			out = append(out, p)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPlanAnswersAndJournalsOnce: a plan is answered with the steps that
// change something, the rest counted, and journaled as one plan.answered
// with the counts and the document's digest, not the document.
func TestPlanAnswersAndJournalsOnce(t *testing.T) {
	h, j := newTestLinkHost(t)
	var planned *declaration.Declaration
	h.plan = func(_ context.Context, _ *journal.Journal, d *declaration.Declaration) (*Planned, error) {
		planned = d
		return &Planned{Result: &agent.Result{Steps: []*agent.Step{
			{ID: "file:/etc/motd", Planned: event.ActionUpdate, Observation: drivers.Observation{Differs: []string{"content"}}},
			{ID: "file:/etc/hosts", Planned: event.ActionUnchanged},
			{ID: "unit:app.service", Planned: event.ActionCreate, Err: errors.New("observe: no manager")},
			{ID: "directory:/etc/app", Planned: event.ActionReleased, Note: "left in place: it holds what the host does not own"},
		}, Refreshes: []*agent.Refresh{{Target: "unit:app.service", How: "reload", Why: []string{"file:/etc/motd would be updated"}}}}}, nil
	}
	before := lastRecord(t, j).Seq
	a := h.Plan(context.Background(), planRequest(2, linkprototest.Doc(2, "secret-looking content\n")))
	if a.Refused != "" || a.Seq != before+1 || a.Unchanged != 1 || len(a.Steps) != 4 {
		t.Fatalf("got %+v, want three steps and a refresh, one unchanged, journaled next", a)
	}
	if s := a.Steps[3]; s.ID != "unit:app.service" || s.Action != "reload" || s.Note != "refresh: file:/etc/motd would be updated" {
		t.Errorf("a refresh the plan would deliver: got %+v", s)
	}
	if s := a.Steps[0]; s.ID != "file:/etc/motd" || s.Action != event.ActionUpdate || len(s.Differs) != 1 {
		t.Errorf("first step: got %+v", s)
	}
	if s := a.Steps[1]; s.Error == "" {
		t.Errorf("a step that met an error: got %+v, want its error", s)
	}
	if s := a.Steps[2]; s.Action != event.ActionReleased || !strings.HasPrefix(s.Note, "left in place: ") {
		t.Errorf("a released step: got %+v, want the reason it is left in place", s)
	}
	if planned == nil || planned.Revision != 2 {
		t.Fatalf("planned %+v, want revision 2", planned)
	}
	got := plans(t, j)
	if len(got) != 1 {
		t.Fatalf("got %d plan.answered, want 1", len(got))
	}
	if p := got[0]; p.Revision != 2 || p.Operator != "tester" || p.Digest != planned.Digest() || p.Update != 1 || p.Unchanged != 1 || p.Failed != 1 {
		t.Errorf("journaled %+v", p)
	}
	r := lastRecord(t, j)
	if strings.Contains(string(r.Payload), "secret-looking") {
		t.Errorf("the record holds the document: %s", r.Payload)
	}
	select {
	case tr := <-h.wake:
		t.Errorf("a plan woke the reconcile loop (%s)", tr)
	default:
	}
}

// TestPlanRefusals: a document that is not the message's is refused and
// journaled; one the host's own admission refuses too; while an apply
// holds the reconcile lock past planLockWait, or ctx ends, the answer is
// busy and nothing is journaled.
func TestPlanRefusals(t *testing.T) {
	h, j := newTestLinkHost(t)
	h.plan = func(context.Context, *journal.Journal, *declaration.Declaration) (*Planned, error) {
		return nil, errors.New("revision 1 is older than revision 2, already applied")
	}
	a := h.Plan(context.Background(), planRequest(3, linkprototest.Doc(4, "x\n")))
	if !strings.Contains(a.Refused, "document is revision 4") || a.Seq == 0 || len(a.Steps) != 0 {
		t.Errorf("mismatched document: got %+v", a)
	}
	a = h.Plan(context.Background(), planRequest(1, linkprototest.Doc(1, "x\n")))
	if !strings.Contains(a.Refused, "older") || a.Busy {
		t.Errorf("refused by admission: got %+v", a)
	}
	if got := plans(t, j); len(got) != 2 || got[0].Refused == "" || got[1].Refused == "" {
		t.Errorf("got %+v, want two refusals journaled", got)
	}

	h.held.Reconciling.Lock()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a = h.Plan(ctx, planRequest(5, linkprototest.Doc(5, "x\n")))
	h.held.Reconciling.Unlock()
	if !a.Busy {
		t.Errorf("with an apply in flight: got %+v, want busy", a)
	}
	if got := plans(t, j); len(got) != 2 {
		t.Errorf("a busy answer journaled: %d records", len(got))
	}
	unsigned := planRequest(5, linkprototest.Doc(5, "x\n"))
	unsigned.Signature = ""
	if a := h.Plan(context.Background(), unsigned); a.Refused == "" {
		t.Errorf("an unsigned request handed to Plan was planned")
	}
}

// TestPlanStepsCarryContent: each step says what it would make the
// resource (its spec's digest, a secret counted by its name, so that the
// same secret sealed to two nodes is the same plan) and carries its
// content diff, bounded.
func TestPlanStepsCarryContent(t *testing.T) {
	h, _ := newTestLinkHost(t)
	sealed := func(s string) *drivers.FileSpec {
		return &drivers.FileSpec{Path: "/etc/app.key", Secret: &drivers.Secret{Name: "app-key", Sealed: s, Sender: "X"}}
	}
	steps := func(key *drivers.FileSpec, content string) *Planned {
		return &Planned{Result: &agent.Result{Steps: []*agent.Step{
			{ID: "file:/etc/app.conf", Spec: &drivers.FileSpec{Path: "/etc/app.conf", Content: content}, Planned: event.ActionCreate},
			{ID: "file:/etc/app.key", Spec: key, Planned: event.ActionCreate},
		}}, Diffs: map[string]string{"file:/etc/app.conf": strings.Repeat("+"+content, 5000)}}
	}
	answer := func(p *Planned, rev uint64) linkproto.PlanAnswer {
		h.plan = func(context.Context, *journal.Journal, *declaration.Declaration) (*Planned, error) { return p, nil }
		return h.Plan(context.Background(), planRequest(rev, linkprototest.Doc(rev, "x\n")))
	}
	key := sealed("AAAA")
	a1 := answer(steps(key, "one\n"), 2)
	a2 := answer(steps(sealed("BBBB"), "one\n"), 3)
	a3 := answer(steps(sealed("AAAA"), "two\n"), 4)
	if len(a1.Steps) != 2 || a1.Steps[0].Digest == "" || a1.Steps[1].Digest == "" {
		t.Fatalf("got %+v, want two steps with digests", a1)
	}
	if a1.Steps[1].Digest != a2.Steps[1].Digest {
		t.Errorf("one secret sealed twice: digests %s and %s, want them equal", a1.Steps[1].Digest, a2.Steps[1].Digest)
	}
	if a1.Steps[0].Digest == a3.Steps[0].Digest {
		t.Errorf("two contents, one digest %s", a1.Steps[0].Digest)
	}
	if d := a1.Steps[0].Diff; len(d) > linkproto.MaxPlanDiffSize || !strings.HasPrefix(d, "+one\n") || !strings.Contains(d, "diff cut") {
		t.Errorf("a long diff: got %d bytes, want it cut to %d with a note", len(d), linkproto.MaxPlanDiffSize)
	}
	if key.Secret.Sealed != "AAAA" {
		t.Errorf("the spec's secret was changed by digesting it")
	}
}
