package journal_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// docRef is the payload of the tests' records that refer to a document.
type docRef struct {
	Doc string `json:"doc"`
}

// refRecord is a record that refers to doc.
func refRecord(doc []byte) event.Record {
	sum := sha256.Sum256(doc)
	return event.New("test.document", 0, "", docRef{Doc: hex.EncodeToString(sum[:])})
}

// documentsOf is the tests' Options.Documents: the document a refRecord
// names.
func documentsOf(r event.Record) []journal.Sum {
	var p docRef
	if json.Unmarshal(r.Payload, &p) != nil || p.Doc == "" {
		return nil
	}
	b, err := hex.DecodeString(p.Doc)
	if err != nil || len(b) != sha256.Size {
		return nil
	}
	return []journal.Sum{journal.Sum(b)}
}

// resources is a synthetic declaration-like document of n resources, the
// content of resource i being content(i).
func resources(n int, content func(i int) string) []byte {
	var b bytes.Buffer
	b.WriteString(`{"mesh":"m","node":"n","revision":1,"resources":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"file":{"path":"/etc/app/f%05d.conf","content":%q,"mode":"0644"}}`, i, content(i))
	}
	b.WriteString("]}")
	return b.Bytes()
}

func setting(i int) string { return fmt.Sprintf("setting-%d = %d\n", i, i*7) }

func stats(t *testing.T, j *journal.Journal) journal.DocumentStats {
	t.Helper()
	st, err := j.DocumentStats()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func mustDocument(t *testing.T, j *journal.Journal, doc []byte) {
	t.Helper()
	got, err := j.Document(sha256.Sum256(doc))
	if err != nil {
		t.Fatalf("document: %v", err)
	}
	if !bytes.Equal(got, doc) {
		t.Fatalf("document: got %d bytes, want the %d stored, byte for byte", len(got), len(doc))
	}
}

// A document far over the record limit is stored beside a small record
// that refers to it, and read back byte for byte.
func TestDocumentOverRecordLimit(t *testing.T) {
	j, _ := newJournal(t, journal.Options{Fold: testFold})
	rng := rand.New(rand.NewPCG(1, 2))
	doc := resources(150_000, func(i int) string { return fmt.Sprintf("%x %x %x\n", rng.Uint64(), rng.Uint64(), rng.Uint64()) })
	if len(doc) <= journal.MaxPayload {
		t.Fatalf("the document is %d bytes, not over the %d a payload may be", len(doc), journal.MaxPayload)
	}
	r := refRecord(doc)
	out, err := j.AppendDocuments([][]byte{doc}, r)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(event.Encode(out[0])); n > 200 {
		t.Errorf("the record is %d bytes, want it small whatever the document", n)
	}
	mustDocument(t, j, doc)
	st := stats(t, j)
	t.Logf("%d bytes in %d chunks (list %d bytes)", len(doc), st.Chunks, st.ListBytes)
	if st.ChunkBytes != int64(len(doc)) {
		t.Errorf("got %d bytes in chunks, want the document's %d", st.ChunkBytes, len(doc))
	}
	if err := j.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// Storing a document again stores nothing; one resource changed in 10,000
// adds about one chunk and the list; an insertion adds only the chunks
// around it, not every chunk after it.
func TestDocumentSharesChunks(t *testing.T) {
	j, _ := newJournal(t, journal.Options{Fold: testFold})
	doc := resources(10_000, setting)
	mustAppendDocs(t, j, doc)
	first := stats(t, j)

	mustAppendDocs(t, j, doc)
	if again := stats(t, j); again != first {
		t.Errorf("storing the same document again: got %+v, want %+v", again, first)
	}

	changed := resources(10_000, func(i int) string {
		if i == 5000 {
			return "changed\n"
		}
		return setting(i)
	})
	mustAppendDocs(t, j, changed)
	after := stats(t, j)
	added := after.ChunkBytes - first.ChunkBytes + after.ListBytes - first.ListBytes
	t.Logf("a %d-byte document of 10,000 resources in %d chunks; one changed adds %d chunk(s), %d bytes",
		len(doc), first.Chunks, after.Chunks-first.Chunks, added)
	if n := after.Chunks - first.Chunks; n < 1 || n > 2 {
		t.Errorf("one resource changed added %d chunks, want 1 or 2", n)
	}
	if limit := int64(len(doc)) / 5; added > limit {
		t.Errorf("one resource changed added %d bytes, over a fifth of the document (%d)", added, limit)
	}

	at := bytes.Index(doc, []byte(`{"file":{"path":"/etc/app/f02000.conf"`))
	inserted := append(append(bytes.Clone(doc[:at]), `{"file":{"path":"/etc/app/new.conf","content":"inserted\n","mode":"0644"}},`...), doc[at:]...)
	before := stats(t, j)
	mustAppendDocs(t, j, inserted)
	if n := stats(t, j).Chunks - before.Chunks; n > 3 {
		t.Errorf("one resource inserted (shifting every later byte) added %d chunks of %d, want at most 3", n, first.Chunks)
	}
	for _, d := range [][]byte{doc, changed, inserted} {
		mustDocument(t, j, d)
	}
}

func mustAppendDocs(t *testing.T, j *journal.Journal, docs ...[]byte) []event.Record {
	t.Helper()
	var recs []event.Record
	for _, d := range docs {
		recs = append(recs, refRecord(d))
	}
	out, err := j.AppendDocuments(docs, recs...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Compaction drops the documents, and their chunks, that no record left
// nor the projection nor the snapshot refers to, and keeps the rest.
func TestCompactDropsUnreferencedDocuments(t *testing.T) {
	clk := newClock()
	var snapshotRefers []byte // the document the stored snapshot names
	opts := journal.Options{
		Fold: testFold, Now: clk.Now, Documents: documentsOf,
		StoredDocuments: func(v journal.View) ([]journal.Sum, error) {
			if snapshotRefers == nil || v.Get(blobKey) == nil {
				return nil, nil
			}
			return []journal.Sum{sha256.Sum256(snapshotRefers)}, nil
		},
	}
	j, _ := newJournal(t, opts)
	gone := resources(3000, func(i int) string { return "gone " + setting(i) })
	held := resources(3000, func(i int) string { return "held " + setting(i) })
	kept := resources(3000, func(i int) string {
		if i == 2900 {
			return "kept\n"
		}
		return setting(i)
	})
	shared := resources(3000, setting)
	// gone and held are referred to only by records compaction drops;
	// the snapshot refers to held. kept is referred to after the cut.
	// shared shares all but its last chunk or two with kept: only kept's
	// chunks must survive.
	mustAppendDocs(t, j, gone, held, shared)
	clk.Advance(48 * time.Hour)
	mustAppendDocs(t, j, kept)
	mustAppend(t, j, rec("test.other", 0, "", ""))
	snapshotRefers = held

	res, err := j.Compact(journal.CompactOptions{Window: time.Hour, KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Through != 3 {
		t.Fatalf("compaction dropped through %d, want 3", res.Through)
	}
	for _, d := range [][]byte{gone, shared} {
		if _, err := j.Document(sha256.Sum256(d)); !errors.Is(err, journal.ErrNoDocument) {
			t.Errorf("a document nothing refers to: got %v, want ErrNoDocument", err)
		}
	}
	mustDocument(t, j, held)
	mustDocument(t, j, kept)
	st := stats(t, j)
	if want := int64(len(held) + len(kept)); st.Documents != 2 || st.ChunkBytes != want {
		t.Errorf("after compaction: got %+v, want 2 documents and their %d bytes of chunks, no more", st, want)
	}
	if err := j.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// Without Options.Documents the journal cannot know what records refer
// to, and keeps every document.
func TestCompactKeepsDocumentsItCannotTrace(t *testing.T) {
	clk := newClock()
	j, _ := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	doc := resources(100, setting)
	mustAppendDocs(t, j, doc)
	clk.Advance(48 * time.Hour)
	mustAppend(t, j, rec("test.other", 0, "", ""))
	if _, err := j.Compact(journal.CompactOptions{Window: time.Hour, KeepLast: 1}); err != nil {
		t.Fatal(err)
	}
	mustDocument(t, j, doc)
}

// A file from before documents were stored (no documents or chunks
// bucket) opens and reads; opened for writing, it gains the buckets and
// stores documents.
func TestDocumentsInOlderFile(t *testing.T) {
	j, path := newJournal(t, journal.Options{Fold: testFold})
	recs := mustAppend(t, j, rec("test.one", 0, "", `{"a":1}`), rec("test.two", 0, "", `{"b":2}`))
	j.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range []string{"documents", "chunks"} {
			if err := tx.DeleteBucket([]byte(b)); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	ro := openAt(t, path, journal.Options{ReadOnly: true})
	if err := ro.Check(); err != nil {
		t.Fatalf("check the older file read-only: %v", err)
	}
	if _, err := ro.Document(sha256.Sum256([]byte("x"))); !errors.Is(err, journal.ErrNoDocument) {
		t.Errorf("a document in the older file: got %v, want ErrNoDocument", err)
	}
	if got := scanAll(t, ro, 1, 0); len(got) != 2 || !sameRecord(got[1], recs[1]) {
		t.Errorf("got records %v, want %v", got, recs)
	}
	ro.Close()

	w := openAt(t, path, journal.Options{Fold: testFold})
	doc := resources(2000, setting)
	mustAppendDocs(t, w, doc)
	mustDocument(t, w, doc)
	if err := w.Check(); err != nil {
		t.Fatalf("check: %v", err)
	}
}

// A chunk changed in the file is damage: the document does not add up.
func TestDocumentDamage(t *testing.T) {
	j, path := newJournal(t, journal.Options{Fold: testFold})
	doc := resources(3000, setting)
	mustAppendDocs(t, j, doc)
	j.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte("chunks")).Cursor()
		k, v := c.First()
		bad := bytes.Clone(v)
		bad[len(bad)/2] ^= 1
		return tx.Bucket([]byte("chunks")).Put(bytes.Clone(k), bad)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	j = openAt(t, path, journal.Options{Fold: testFold})
	if _, err := j.Document(sha256.Sum256(doc)); !errors.Is(err, journal.ErrCorrupt) {
		t.Errorf("document with a changed chunk: got %v, want ErrCorrupt", err)
	}
	if err := j.Check(); !errors.Is(err, journal.ErrCorrupt) {
		t.Errorf("check: got %v, want ErrCorrupt", err)
	}
}

// expandRef is the tests' Options.Expand: a test.document record is read
// with the document it names in its payload.
func expandRef(r event.Record, document func(journal.Sum) ([]byte, error)) (event.Record, error) {
	sums := documentsOf(r)
	if len(sums) == 0 {
		return r, nil
	}
	doc, err := document(sums[0])
	if err != nil {
		return r, err
	}
	r.Payload, _ = json.Marshal(map[string]any{"doc": hex.EncodeToString(sums[0][:]), "body": string(doc)})
	return r, nil
}

// Records are read, and folded, with what Options.Expand puts back from
// their documents, and stored without it.
func TestExpand(t *testing.T) {
	var folded []event.Record
	fold := func(st journal.Store, recs []event.Record) error {
		folded = append(folded, recs...)
		return nil
	}
	j, path := newJournal(t, journal.Options{Fold: fold, Expand: expandRef, Documents: documentsOf})
	doc := []byte("the body")
	out := mustAppendDocs(t, j, doc)
	sum := journal.SumOf(doc)
	want := `{"body":"the body","doc":"` + hex.EncodeToString(sum[:]) + `"}`
	if len(folded) != 1 || string(folded[0].Payload) != want {
		t.Errorf("folded %v, want the record expanded: %s", folded, want)
	}
	if got := scanAll(t, j, 1, 0); len(got) != 1 || string(got[0].Payload) != want {
		t.Errorf("scanned %v, want the record expanded: %s", got, want)
	}
	if r, _, err := j.Get(1); err != nil || string(r.Payload) != want {
		t.Errorf("got %v (%v), want the record expanded: %s", r, err, want)
	}
	j.Close()
	raw := openAt(t, path, journal.Options{ReadOnly: true})
	if got := scanAll(t, raw, 1, 0); len(got) != 1 || !bytes.Equal(got[0].Payload, out[0].Payload) {
		t.Errorf("stored %v, want the record as appended: %s", got, out[0].Payload)
	}
}

// A record naming a document that is not there is damage that Check finds.
func TestCheckFindsMissingDocument(t *testing.T) {
	opts := journal.Options{Fold: testFold, Documents: documentsOf}
	j, path := newJournal(t, opts)
	doc := resources(10, setting)
	mustAppendDocs(t, j, doc)
	j.Close()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := journal.SumOf(doc)
	err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("documents")).Delete(sum[:]) })
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	j = openAt(t, path, opts)
	if err := j.Check(); !errors.Is(err, journal.ErrCorrupt) || !strings.Contains(err.Error(), "names document") {
		t.Errorf("check: got %v, want ErrCorrupt naming the missing document", err)
	}
}
