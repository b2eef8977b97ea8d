package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// after returns the records after seq from in the journal at path, as
// stored (nothing stored apart put back), and the stored state.
func after(t testing.TB, path string, from uint64) ([]event.Record, projector.State) {
	t.Helper()
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var recs []event.Record
	if err := j.Scan(from+1, 0, func(r event.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	s, _, err := hostjournal.StoredState(j)
	if err != nil {
		t.Fatal(err)
	}
	return recs, s
}

func encodedSize(recs []event.Record) (n int) {
	for _, r := range recs {
		n += len(event.Encode(r))
	}
	return n
}

// An unchanged declaration applied again adds a declaration.reapplied
// that refers to the record holding the document, not the document again:
// what an apply adds is a small fraction of what the first one stored, and
// the desired state is as it was. It logs the bytes per apply, the figure
// the journal issue asks for.
func TestApplyUnchangedAddsOneSmallRecord(t *testing.T) {
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	decl := filepath.Join(dir, "decl.yaml")
	writeFilesDeclaration(t, decl, 1000)
	path := filepath.Join(state, "journal.db")
	apply := func() {
		t.Helper()
		if code := runCLI(t.Context(), []string{"--root", root, "--state-dir", state, "apply", decl}, io.Discard, os.Stderr, nil); code != 0 {
			t.Fatalf("apply: exit %d", code)
		}
	}
	apply()
	recs, before := after(t, path, 0)
	if recs[0].Kind != event.DeclarationReceived {
		t.Fatalf("first record is %s, want %s", recs[0].Kind, event.DeclarationReceived)
	}
	received := recs[0]
	firstDocs := documentStats(t, path)

	const applies = 20
	head := before.Head
	for range applies {
		apply()
	}
	added, now := after(t, path, head)
	var reapplied []event.Record
	for _, r := range added {
		switch r.Kind {
		case event.DeclarationReceived:
			t.Fatalf("#%d: an unchanged declaration was journaled whole again", r.Seq)
		case event.DeclarationReapplied:
			reapplied = append(reapplied, r)
			if r.Cause != received.Seq {
				t.Errorf("#%d: cause is #%d, want the declaration.received #%d", r.Seq, r.Cause, received.Seq)
			}
		}
	}
	if len(reapplied) != applies {
		t.Fatalf("%d applies journaled %d declaration.reapplied, want one each", applies, len(reapplied))
	}
	perApply := encodedSize(added) / applies
	docs := documentStats(t, path)
	first := int64(len(event.Encode(received))) + docs.ChunkBytes + docs.ListBytes
	t.Logf("an unchanged apply of 1,000 files adds %d record bytes (%d records); the first apply stored %d bytes (a %d-byte record, %d of documents)",
		perApply, len(added)/applies, first, len(event.Encode(received)), first-int64(len(event.Encode(received))))
	if limit := first / 100; int64(perApply) > limit {
		t.Errorf("an unchanged apply adds %d bytes, over 1%% of what the first stored (%d)", perApply, limit)
	}
	if docs != firstDocs {
		t.Errorf("unchanged applies stored documents: got %+v, want %+v as after the first", docs, firstDocs)
	}
	if d := projector.Diff(projector.State{Desired: before.Desired}, projector.State{Desired: now.Desired}); len(d) > 0 {
		t.Errorf("the desired declaration changed:\n%v", d)
	}

	// A changed declaration is journaled anew: its record, and of its
	// document and resource list what the journal did not hold.
	docsBefore := docs
	writeFilesDeclaration(t, decl, 999)
	apply()
	changed, _ := after(t, path, now.Head)
	if changed[0].Kind != event.DeclarationReceived {
		t.Errorf("a changed declaration was journaled as %s, want %s", changed[0].Kind, event.DeclarationReceived)
	}
	docsAfter := documentStats(t, path)
	stored := docsAfter.ChunkBytes - docsBefore.ChunkBytes + docsAfter.ListBytes - docsBefore.ListBytes
	whole := firstDocs.ChunkBytes // the first declaration's document and resource list
	t.Logf("one file of 1,000 dropped: a %d-byte declaration.received, and %d bytes of documents (%d new chunks) of the %d-byte document and its resource list",
		len(event.Encode(changed[0])), stored, docsAfter.Chunks-docsBefore.Chunks, whole)
	if n := len(event.Encode(changed[0])); n > 1024 {
		t.Errorf("the declaration.received is %d bytes, want it small: what it names is stored apart", n)
	}
	if stored >= whole/2 {
		t.Errorf("one file of 1,000 dropped stored %d bytes of %d, want the chunks around it only", stored, whole)
	}
}

func documentStats(t testing.TB, path string) journal.DocumentStats {
	t.Helper()
	j, err := hostjournal.OpenReadOnly(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	st, err := j.DocumentStats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A declaration of 10,000 files that changes one of them stores about one
// chunk of its document and one of its resource list, and a small record:
// not the megabyte and more the whole would be.
func TestDeclarationChangedInOneResourceAddsAboutAChunk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "journal.db")
	j, err := hostjournal.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	declare := func(content string) {
		t.Helper()
		file := filepath.Join(dir, "decl.yaml")
		writeFilesDeclaration(t, file, 9_999) // and a directory: 10,000 resources
		if content != "" {
			b, _ := os.ReadFile(file)
			was := b
			b = bytes.Replace(b, []byte(`f05000.conf, content: "setting-5000 = 35000\n"`), []byte(`f05000.conf, content: "`+content+`"`), 1)
			if bytes.Equal(b, was) {
				t.Fatal("the test's declaration has no file 5000 to change")
			}
			if err := os.WriteFile(file, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		d, err := readDeclaration(file)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := hostjournal.AppendDeclaration(j, d, hostjournal.Declared(d.Expanded()), "file:"+file, nil); err != nil {
			t.Fatal(err)
		}
	}
	declare("")
	first, err := j.DocumentStats()
	if err != nil {
		t.Fatal(err)
	}
	declare("changed")
	then, err := j.DocumentStats()
	if err != nil {
		t.Fatal(err)
	}
	if then.Documents != first.Documents+2 {
		t.Fatalf("got %d documents, want %d: the changed declaration's document and resource list", then.Documents, first.Documents+2)
	}
	added := then.ChunkBytes - first.ChunkBytes + then.ListBytes - first.ListBytes
	j.Close()
	recs, _ := after(t, path, 1)
	t.Logf("10,000 files, %d bytes stored apart: one changed adds a %d-byte record and %d bytes (%d chunks)",
		first.ChunkBytes, len(event.Encode(recs[0])), added, then.Chunks-first.Chunks)
	if n := then.Chunks - first.Chunks; n < 2 || n > 4 {
		t.Errorf("one file changed added %d chunks, want one or two of the document and of the list", n)
	}
	if added > first.ChunkBytes/8 {
		t.Errorf("one file changed added %d bytes, over an eighth of the %d the declaration stores", added, first.ChunkBytes)
	}
	if n := len(event.Encode(recs[0])); n > 1024 {
		t.Errorf("the declaration.received is %d bytes, want it small", n)
	}
}

// The reconcile of an unchanged declaration applied again is traced, cause
// by cause, through the declaration.reapplied to the declaration.received
// that holds the declaration: what `journal --why` follows.
func TestReappliedIsTracedToTheDeclaration(t *testing.T) {
	dir := t.TempDir()
	root, state := filepath.Join(dir, "root"), filepath.Join(dir, "state")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	decl := filepath.Join(dir, "decl.yaml")
	writeFilesDeclaration(t, decl, 5)
	apply := func() {
		t.Helper()
		var out bytes.Buffer
		if code := runCLI(t.Context(), []string{"--root", root, "--state-dir", state, "apply", decl}, &out, &out, nil); code != 0 {
			t.Fatalf("apply: exit %d\n%s", code, out.String())
		}
	}
	apply()
	// A file changed by hand: the reapply repairs it, so it journals a
	// whole reconcile, not a quiet one.
	if err := os.WriteFile(filepath.Join(root, "etc/app/f00003.conf"), []byte("changed by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	apply()
	j, err := hostjournal.OpenReadOnly(filepath.Join(state, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	var started uint64
	if err := j.ScanKind(event.ReconcileStarted, 1, func(r event.Record) error { started = r.Seq; return nil }); err != nil {
		t.Fatal(err)
	}
	chain, err := j.Chain(started)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []event.Kind
	for _, r := range chain {
		kinds = append(kinds, r.Kind)
	}
	want := []event.Kind{event.ReconcileStarted, event.DeclarationReapplied, event.DeclarationReceived}
	if !slices.Equal(kinds, want) {
		t.Errorf("the reapply's reconcile is traced through %v, want %v", kinds, want)
	}
}
