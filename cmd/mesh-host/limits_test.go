package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/declaration/declarationtest"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

// kindsJournaled lists the kinds of every record in j, in order.
func kindsJournaled(t *testing.T, j *journal.Journal) []event.Kind {
	t.Helper()
	var out []event.Kind
	if err := j.Scan(1, 0, func(r event.Record) error { out = append(out, r.Kind); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// A push over a limit is refused naming it, in the Ack and in a
// declaration.refused record; nothing is journaled as received.
func TestAcceptRefusesOverTheLimits(t *testing.T) {
	for _, c := range declarationtest.OverLimits("lab", "web-1", 1) {
		h, j := newTestLinkHost(t)
		ack := h.Accept(context.Background(), linkprototest.Push(1, string(c.Document)), event.TriggerPushed)
		if ack.Accepted || !strings.Contains(ack.Reason, c.Limit) {
			t.Errorf("%s: got %.300v", c.Limit, ack)
			continue
		}
		var p event.DeclarationRefusedPayload
		if r := lastRecord(t, j); r.Kind != event.DeclarationRefused || json.Unmarshal(r.Payload, &p) != nil || p.Reason != ack.Reason {
			t.Errorf("%s: journaled %s %.300s", c.Limit, r.Kind, r.Payload)
		}
		if kinds := kindsJournaled(t, j); len(kinds) != 1 {
			t.Errorf("%s: journaled %v, want the refusal alone", c.Limit, kinds)
		}
	}
}

// A push at the limits, the largest its message carries, is accepted and
// journaled whole: its document stored apart, byte for byte, the record
// naming it.
func TestAcceptAtTheLimits(t *testing.T) {
	for name, d := range map[string]*declaration.Declaration{
		"maximal": declarationtest.MaximalOf("lab", "web-1", 1, linkproto.MaxDeclarationSize-2<<10),
	} {
		h, j := newTestLinkHost(t)
		doc, _ := d.MarshalJSON()
		ack := h.Accept(context.Background(), linkprototest.Push(1, string(doc)), event.TriggerPushed)
		if !ack.Accepted {
			t.Errorf("%s: refused: %.300s", name, ack.Reason)
			continue
		}
		var p event.DeclarationReceivedPayload
		r := lastRecord(t, j)
		if r.Kind != event.DeclarationReceived || json.Unmarshal(r.Payload, &p) != nil || len(p.Resources) != len(d.Resources) {
			t.Errorf("%s: journaled %s, %d resources", name, r.Kind, len(p.Resources))
		}
		if stored, err := hostjournal.Document(j, p.Document, p.DocumentSHA256); err != nil || !bytes.Equal(stored, doc) {
			t.Errorf("%s: the document journaled is %d bytes (%v), want the %d pushed", name, len(stored), err, len(doc))
		}
	}
}

// applyFile runs `mesh-host apply` of a file holding data in a fresh root
// and state directory, and returns its exit code, its output (stdout and
// stderr) and the journal, open.
func applyFile(t *testing.T, name string, data []byte) (int, string, *journal.Journal) {
	t.Helper()
	dir := t.TempDir()
	root, state, file := filepath.Join(dir, "root"), filepath.Join(dir, "state"), filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	code := runCLI(context.Background(), []string{"--root", root, "--state-dir", state, "apply", file}, &out, &out, nil)
	j, err := hostjournal.Open(filepath.Join(state, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return code, out.String(), j
}

// A file over a limit is refused naming it and journaled as refused;
// nothing is received, nothing is in progress.
func TestApplyRefusesOverTheLimits(t *testing.T) {
	for _, c := range declarationtest.OverLimits("lab", "web-1", 1) {
		for _, name := range []string{"d.json", "d.yaml"} {
			code, stderr, j := applyFile(t, name, c.Document)
			if code != command.ExitRefused || !strings.Contains(stderr, c.Limit) {
				t.Errorf("%s %s: exit %d: %.300s", name, c.Limit, code, stderr)
			}
			if kinds := kindsJournaled(t, j); !slices.Equal(kinds, []event.Kind{event.DeclarationRefused}) {
				t.Errorf("%s %s: journaled %v, want the refusal alone", name, c.Limit, kinds)
			}
		}
	}
}

// A file far over the limit is refused without being read whole: a sparse
// gigabyte is read no further than the limit.
func TestApplyReadsNoFurtherThanTheLimit(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "huge.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d, err := readDeclaration(f.Name())
	if d != nil || err == nil || !strings.Contains(err.Error(), fmt.Sprintf("over the limit for a declaration: %d bytes (it was read no further than %d)", declaration.MaxBytes, declaration.MaxBytes+1)) {
		t.Errorf("got %v, %.300v", d, err)
	}
}

// A path at the limit is accepted, and one the machine cannot create (the
// root prefix makes it longer than PATH_MAX) fails as an outcome: the
// reconcile ends, failed, rather than staying in progress. A path a few
// bytes longer used to be accepted and leave it in progress, its ID too
// long to journal.
func TestApplyAtThePathLimitEnds(t *testing.T) {
	d := &declaration.Declaration{Mesh: "lab", Node: "web-1", Revision: 1, Resources: []drivers.Spec{
		&drivers.FileSpec{Path: declarationtest.LongPath("/srv", declaration.MaxPathBytes), Content: "x"},
		&drivers.FileSpec{Path: "/etc/motd", Content: "hi\n"},
	}}
	doc, _ := d.MarshalJSON()
	code, stderr, j := applyFile(t, "d.json", doc)
	if code != command.ExitFailed || !strings.Contains(stderr, "1 changed, 0 unchanged, 1 failed") {
		t.Errorf("exit %d: %.300s", code, stderr)
	}
	s, _, err := hostjournal.StoredState(j)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pending != nil || s.LastReconcile == nil || s.LastReconcile.Result != event.ResultFailed || s.LastReconcile.Failed != 1 || s.LastReconcile.Changed != 1 {
		t.Errorf("pending %+v, last reconcile %+v: want ended, one failed, one changed", s.Pending, s.LastReconcile)
	}
}
