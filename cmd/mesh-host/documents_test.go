package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

// A journal written before documents were stored apart (the document in
// its declaration.received) goes on working: it is reconciled from,
// replayed and verified; declarations accepted after it store their
// documents apart, and are reconciled from, replayed and verified the same;
// and compaction keeps the document the snapshot's declaration needs and
// drops the one nothing needs any more.
func TestDeclarationDocumentsStoredApart(t *testing.T) {
	dir := t.TempDir()
	state, root := filepath.Join(dir, "state"), filepath.Join(dir, "root")
	for _, d := range []string{state, filepath.Join(root, "etc")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := `{"mesh":"lab","node":"web-1","urls":["tls://127.0.0.1:4222"],"signing_key":"` + linkprototest.SigningKeyPub + `"}`
	if err := os.WriteFile(filepath.Join(state, enrolment.LinkConfigFile), []byte(link), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(state, "journal.db")
	run := func(args ...string) string {
		t.Helper()
		var out bytes.Buffer
		if code := runCLI(context.Background(), append([]string{"--root", root, "--state-dir", state, "--journal", path}, args...), &out, &out, nil); code != 0 {
			t.Fatalf("mesh-host %s: exit %d\n%s", strings.Join(args, " "), code, out.String())
		}
		return out.String()
	}
	motd := func(want string) {
		t.Helper()
		if got, err := os.ReadFile(filepath.Join(root, "etc/motd")); err != nil || string(got) != want {
			t.Fatalf("got /etc/motd %q (%v), want %q", got, err, want)
		}
	}

	// Revision 1 as an older host journaled it: the document inline.
	j, err := hostjournal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old := linkprototest.Push(1, linkprototest.Doc(1, "one\n"))
	decl, err := declaration.ParseJSON("test", old.Document)
	if err != nil {
		t.Fatal(err)
	}
	p := event.DeclarationReceivedPayload{Revision: 1, Digest: decl.Digest(), Source: "link:pushed", Document: old.Document,
		Operator: old.Operator, Signer: old.Signer, Signature: old.Signature}
	if _, err := j.Append(event.New(event.DeclarationReceived, 0, "", p)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	run("check")
	motd("one\n")

	// Revisions 2 and 3 pushed now: their documents stored apart.
	push := func(rev uint64, content string) (event.Record, []byte) {
		t.Helper()
		j, err := hostjournal.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		e := &env{ctx: context.Background(), stdout: io.Discard, stderr: io.Discard, now: time.Now,
			cli: &cli{OwnUnit: "mesh-host.service", Root: root, Parallel: 2}}
		h := service.NewLinkHost(&service.Held{Journal: j}, e.admissible, nil)
		d := linkprototest.Push(rev, linkprototest.Doc(rev, content))
		ack := h.Accept(context.Background(), d, event.TriggerPushed)
		if !ack.Accepted {
			t.Fatal(ack.Reason)
		}
		r, _, err := j.Get(ack.Seq)
		if err != nil {
			t.Fatal(err)
		}
		return r, d.Document
	}
	r2, doc2 := push(2, "two\n")
	var got event.DeclarationReceivedPayload
	if err := json.Unmarshal(r2.Payload, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Document) > 0 || got.DocumentSHA256 != journal.FormatSum(journal.SumOf(doc2)) || got.DocumentBytes != len(doc2) {
		t.Fatalf("got a record with %d document bytes inline, naming %s (%d bytes); want none inline, naming %s (%d bytes)",
			len(got.Document), got.DocumentSHA256, got.DocumentBytes, journal.FormatSum(journal.SumOf(doc2)), len(doc2))
	}
	run("check")
	motd("two\n")
	r3, doc3 := push(3, "three\n")
	run("check")
	motd("three\n")

	if out := run("journal", "--verify"); !strings.Contains(out, "3 from the mesh, verified; 0 local; 0 failed") {
		t.Fatalf("journal --verify:\n%s", out)
	}
	run("replay", "--verify")

	// Compaction through revision 3's record: the snapshot's declaration
	// is revision 3, whose document stays; revision 2's goes.
	j, err = hostjournal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.MarkAcked(r3.Seq); err != nil {
		t.Fatal(err)
	}
	res, err := j.Compact(journal.CompactOptions{Window: time.Nanosecond, KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	info, _ := j.Info()
	if res.Through < r3.Seq {
		t.Fatalf("compacted through #%d, want at least #%d (head %d)", res.Through, r3.Seq, info.Head)
	}
	if _, err := j.Document(journal.SumOf(doc2)); err == nil {
		t.Errorf("revision 2's document outlived every record and state that named it")
	}
	if d, err := j.Document(journal.SumOf(doc3)); err != nil || !bytes.Equal(d, doc3) {
		t.Errorf("revision 3's document, which the snapshot names: got %q, %v", d, err)
	}
	j.Close()
	if out := run("journal", "--verify"); !strings.Contains(out, "revision 3: signed by the mesh") || !strings.Contains(out, "0 failed") {
		t.Fatalf("journal --verify after compaction:\n%s", out)
	}
	run("replay", "--verify")
	run("check")
	motd("three\n")
}

// The spec digests journaled with a declaration (hostjournal.Declared, from
// the declaration as parsed) are those of the specs a later reconcile
// decodes from the stored document: check and the service reuse them
// instead of encoding every spec again, so they must not differ by a byte.
func TestDeclaredDigestsAreTheStoredDocumentsOwn(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			d, err := readDeclaration(path)
			if err != nil {
				t.Fatal(err)
			}
			declared := hostjournal.Declared(d.Expanded())
			doc, err := d.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			stored, err := declaration.DecodeStored(doc)
			if err != nil {
				t.Fatal(err)
			}
			specs := stored.Expanded()
			got := hostjournal.SpecDigests(specs, declared)
			if got == nil {
				t.Fatalf("the journaled list does not name the stored document's %d resources", len(specs))
			}
			for i, spec := range specs {
				if want := drivers.SpecDigest(spec); got[i] != want {
					t.Errorf("%s: journaled digest %s, the stored document's spec is %s", drivers.ID(spec), got[i], want)
				}
			}
		})
	}
}

// A list that does not name the specs, in order, gives no digests: the
// reconcile computes them.
func TestSpecDigestsRefuseAnotherList(t *testing.T) {
	d, err := declaration.ParseYAML("test", []byte("mesh: m\nnode: n\nrevision: 1\nresources:\n  - directory: {path: /a}\n  - directory: {path: /b}\n"))
	if err != nil {
		t.Fatal(err)
	}
	specs := d.Expanded()
	declared := hostjournal.Declared(specs)
	if hostjournal.SpecDigests(specs, declared) == nil {
		t.Fatal("the declaration's own list refused")
	}
	for name, other := range map[string][]event.DeclaredResource{
		"shorter":   declared[:1],
		"reordered": {declared[1], declared[0]},
		"no digest": {declared[0], {ID: declared[1].ID}},
		"none":      nil,
	} {
		if got := hostjournal.SpecDigests(specs, other); got != nil {
			t.Errorf("%s: got %v, want nil", name, got)
		}
	}
}
