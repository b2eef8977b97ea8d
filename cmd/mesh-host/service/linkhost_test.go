package service

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
	"github.com/mesh-host/mesh-host/projector"
)

func newTestLinkHost(t *testing.T) (*LinkHost, *journal.Journal) {
	t.Helper()
	j, err := hostjournal.Open(t.TempDir() + "/journal.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	// What package main admits, as far as these tests need: no older
	// revision, and not the host's own unit.
	admit := func(d *declaration.Declaration, s projector.State) error {
		if s.Desired != nil && d.Revision < s.Desired.Revision {
			return fmt.Errorf("revision %d is older than revision %d, already applied", d.Revision, s.Desired.Revision)
		}
		return d.RefuseInstallation(declaration.Installation{Unit: "mesh-host.service"})
	}
	return NewLinkHost(&Held{Journal: j}, admit, nil), j
}

func lastRecord(t *testing.T, j *journal.Journal) event.Record {
	t.Helper()
	in, err := j.Info()
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := j.Get(in.Head)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAccept(t *testing.T) {
	h, j := newTestLinkHost(t)

	ack := h.Accept(context.Background(), linkprototest.Push(2, linkprototest.Doc(2, "hi\n")), event.TriggerPushed)
	if !ack.Accepted || ack.Seq == 0 || ack.Revision != 2 || ack.Node != "web-1" {
		t.Fatalf("got %+v, want accepted", ack)
	}
	r := lastRecord(t, j)
	var p event.DeclarationReceivedPayload
	json.Unmarshal(r.Payload, &p)
	doc, err := hostjournal.Document(j, p.Document, p.DocumentSHA256)
	if r.Kind != event.DeclarationReceived || r.Seq != ack.Seq || p.Revision != 2 || p.Source != "link:pushed" || len(doc) == 0 || err != nil {
		t.Errorf("journaled %s %+v (document: %v)", r.Kind, p, err)
	}
	// The record keeps the signature over the document as it arrived: it
	// alone, with the document it names, proves the mesh sent it.
	if p.Operator != "tester" || p.Signer != linkprototest.SigningKeyPub ||
		linkproto.VerifyStored(linkprototest.SigningKeyPub, "lab", "web-1", p.Revision, p.Operator, doc, p.Signer, p.Signature) != nil {
		t.Errorf("journaled without a signature that verifies: %+v", p)
	}
	unsigned := linkprototest.Push(3, linkprototest.Doc(3, "forged\n"))
	unsigned.Signature, unsigned.Signer = "", ""
	if ack := h.Accept(context.Background(), unsigned, event.TriggerPushed); ack.Accepted {
		t.Errorf("an unsigned declaration handed to Accept was accepted")
	}
	select {
	case tr := <-h.wake:
		if tr != event.TriggerPushed {
			t.Errorf("woke the reconcile loop with %s", tr)
		}
	default:
		t.Error("the reconcile loop was not woken")
	}

	// The same again: acknowledged with the seq it has, not journaled twice,
	// and no new reconcile.
	head := lastRecord(t, j).Seq
	again := h.Accept(context.Background(), linkprototest.Push(2, linkprototest.Doc(2, "hi\n")), event.TriggerReconnect)
	if !again.Accepted || again.Seq != ack.Seq || lastRecord(t, j).Seq != head || len(h.wake) != 0 {
		t.Errorf("the same declaration again: got %+v, head %d→%d", again, head, lastRecord(t, j).Seq)
	}

	refusals := []struct {
		name   string
		d      *linkproto.Declaration
		reason string
	}{
		{"same revision, other content", linkprototest.Push(2, linkprototest.Doc(2, "changed\n")), "already accepted"},
		{"older revision", linkprototest.Push(1, linkprototest.Doc(1, "old\n")), "older than revision 2"},
		{"document for another node", linkprototest.Push(3, `{"mesh":"lab","node":"web-2","revision":3,"resources":[]}`), "web-2"},
		{"document of another revision", linkprototest.Push(3, linkprototest.Doc(4, "x")), "revision 4"},
		{"bad document", linkprototest.Push(3, `{"mesh":"lab","node":"web-1","revision":3,"resources":[{"file":{"path":"../etc/shadow","content":"x"}}]}`), "resources[0].file.path"},
		{"unknown field", linkprototest.Push(3, `{"mesh":"lab","node":"web-1","revision":3,"bogus":1,"resources":[]}`), "bogus"},
		{"own unit", linkprototest.Push(3, `{"mesh":"lab","node":"web-1","revision":3,"resources":[{"unit":{"name":"mesh-host.service","content":"[Service]\\nExecStart=/bin/true\\n"}}]}`), "own unit"},
	}
	for _, c := range refusals {
		ack := h.Accept(context.Background(), c.d, event.TriggerPushed)
		if ack.Accepted || !strings.Contains(ack.Reason, c.reason) {
			t.Errorf("%s: got %+v, want refused with %q", c.name, ack, c.reason)
			continue
		}
		r := lastRecord(t, j)
		var p event.DeclarationRefusedPayload
		json.Unmarshal(r.Payload, &p)
		if r.Kind != event.DeclarationRefused || p.Reason != ack.Reason || p.Source != "link:pushed" {
			t.Errorf("%s: journaled %s %+v", c.name, r.Kind, p)
		}
	}
	if len(h.wake) != 0 {
		t.Error("a refusal woke the reconcile loop")
	}
}

// A push is answered while an apply holds the reconcile lock.
func TestAcceptDoesNotWaitForAnApply(t *testing.T) {
	h, _ := newTestLinkHost(t)
	h.held.Reconciling.Lock()
	defer h.held.Reconciling.Unlock()
	done := make(chan linkproto.Ack)
	go func() {
		done <- h.Accept(context.Background(), linkprototest.Push(1, linkprototest.Doc(1, "x")), event.TriggerPushed)
	}()
	select {
	case ack := <-done:
		if !ack.Accepted {
			t.Errorf("got %+v", ack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Accept waited for the reconcile lock")
	}
}

// Pushes accepted during an apply coalesce into one reconcile.
func TestPushesCoalesce(t *testing.T) {
	h, _ := newTestLinkHost(t)
	for rev := range uint64(5) {
		if ack := h.Accept(context.Background(), linkprototest.Push(rev+1, linkprototest.Doc(rev+1, "x")), event.TriggerPushed); !ack.Accepted {
			t.Fatalf("got %+v", ack)
		}
	}
	if len(h.wake) != 1 {
		t.Errorf("got %d reconciles due, want 1", len(h.wake))
	}
}
