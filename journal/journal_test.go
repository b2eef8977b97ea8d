package journal_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// Child process modes: the test binary re-executed with one of these set to
// a journal path plays the other process.
const (
	envHold  = "JOURNAL_TEST_HOLD"  // open the journal, print "ready", block on stdin
	envCrash = "JOURNAL_TEST_CRASH" // append batches forever, printing each batch's last seq
)

func TestMain(m *testing.M) {
	if path := os.Getenv(envHold); path != "" {
		os.Exit(holdChild(path))
	}
	if path := os.Getenv(envCrash); path != "" {
		os.Exit(crashChild(path))
	}
	os.Exit(m.Run())
}

// holdChild holds the journal at path open until its stdin closes.
func holdChild(path string) int {
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer j.Close()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// foldState is what testFold keeps: a count, the last sequence, and a hash
// chained over every record's stored form, so any lost, repeated, reordered
// or altered record changes it.
type foldState struct {
	Count uint64 `json:"count"`
	Last  uint64 `json:"last"`
	Sum   uint64 `json:"sum"`
}

// blobKey is where foldInto keeps a blob fold's output in the Store.
var blobKey = []byte("blob")

// foldInto adapts a fold over one blob to a journal.FoldFunc.
func foldInto(f func(prev []byte, recs []event.Record) ([]byte, error)) journal.FoldFunc {
	return func(st journal.Store, recs []event.Record) error {
		out, err := f(st.Get(blobKey), recs)
		if err != nil {
			return err
		}
		// out may alias what Get returned, a page of the file that may move
		// before the transaction commits.
		return st.Put(blobKey, bytes.Clone(out))
	}
}

// testFold is the FoldFunc most tests use.
var testFold = foldInto(blobFold)

// projectionOf returns the stored projection's blob and head.
func projectionOf(j *journal.Journal) ([]byte, uint64, error) {
	var b []byte
	var h uint64
	err := j.Projection(func(v journal.View, head uint64) error {
		b, h = bytes.Clone(v.Get(blobKey)), head
		return nil
	})
	return b, h, err
}

// snapshotOf returns the compaction snapshot's blob and sequence.
func snapshotOf(j *journal.Journal) ([]byte, uint64, error) {
	var b []byte
	var h uint64
	err := j.Snapshot(func(v journal.View, seq uint64) error {
		b, h = bytes.Clone(v.Get(blobKey)), seq
		return nil
	})
	return b, h, err
}

func blobFold(prev []byte, recs []event.Record) ([]byte, error) {
	var s foldState
	if prev != nil {
		if err := json.Unmarshal(prev, &s); err != nil {
			return nil, fmt.Errorf("previous projection: %w", err)
		}
	}
	for _, r := range recs {
		s.Count++
		s.Last = r.Seq
		h := fnv.New64a()
		_ = binary.Write(h, binary.BigEndian, s.Sum)
		h.Write(event.Encode(r))
		s.Sum = h.Sum64()
	}
	return json.Marshal(s)
}

func mustFold(t *testing.T, prev []byte, recs []event.Record) []byte {
	t.Helper()
	b, err := blobFold(prev, recs)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// clock is a fake Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock {
	return &clock{t: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func openAt(t *testing.T, path string, opts journal.Options) *journal.Journal {
	t.Helper()
	j, err := journal.Open(path, opts)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func newJournal(t *testing.T, opts journal.Options) (*journal.Journal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	return openAt(t, path, opts), path
}

func rec(kind event.Kind, cause uint64, resource, payload string) event.Record {
	r := event.Record{Kind: kind, Cause: cause, Resource: resource}
	if payload != "" {
		r.Payload = json.RawMessage(payload)
	}
	return r
}

func mustAppend(t *testing.T, j *journal.Journal, recs ...event.Record) []event.Record {
	t.Helper()
	out, err := j.Append(recs...)
	if err != nil {
		t.Fatalf("append %d records: %v", len(recs), err)
	}
	return out
}

func scanAll(t *testing.T, j *journal.Journal, from, to uint64) []event.Record {
	t.Helper()
	var got []event.Record
	if err := j.Scan(from, to, func(r event.Record) error {
		got = append(got, r)
		return nil
	}); err != nil {
		t.Fatalf("scan %d..%d: %v", from, to, err)
	}
	return got
}

func seqsOf(recs []event.Record) []uint64 {
	s := make([]uint64, len(recs))
	for i, r := range recs {
		s[i] = r.Seq
	}
	return s
}

func seqRange(from, to uint64) []uint64 {
	var s []uint64
	for i := from; i <= to && from != 0; i++ {
		s = append(s, i)
	}
	return s
}

// equalSeqs compares sequences, treating nil and empty alike.
func equalSeqs(a, b []uint64) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

func short(s []uint64) string {
	if len(s) <= 8 {
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("%d seqs %v … %v", len(s), s[:3], s[len(s)-3:])
}

func info(t *testing.T, j *journal.Journal) journal.Info {
	t.Helper()
	in, err := j.Info()
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	return in
}

// sameRecord compares records as stored (time by instant).
func sameRecord(a, b event.Record) bool {
	return bytes.Equal(event.Encode(a), event.Encode(b))
}

func TestAppendAssignsSeqAndTime(t *testing.T) {
	tests := []struct {
		name    string
		batches [][]event.Record
	}{
		{"single", [][]event.Record{{rec(event.HostStarted, 0, "", `{"version":"v1","pid":1}`)}}},
		{"batch", [][]event.Record{{
			rec(event.DeclarationReceived, 0, "", `{"revision":1}`),
			rec(event.ReconcileStarted, 1, "", `{"trigger":"start"}`),
			rec(event.ResourceApplied, 2, "file:/etc/x", `{"action":"created"}`),
		}}},
		{"batches", [][]event.Record{
			{rec(event.LinkUp, 0, "", "")},
			{rec(event.DriftObserved, 0, "file:/etc/x", `{"differs":["mode"]}`), rec(event.ReconcileStarted, 2, "", `{}`)},
			{rec(event.LinkDown, 1, "", `{"reason":"eof"}`)},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			j, _ := newJournal(t, journal.Options{Now: clk.Now})
			var want []event.Record
			for _, batch := range tt.batches {
				clk.Advance(time.Minute)
				out := mustAppend(t, j, batch...)
				if got, want := len(out), len(batch); got != want {
					t.Fatalf("append returned %d records, want %d", got, want)
				}
				for i, r := range out {
					wantSeq := uint64(len(want) + i + 1)
					if r.Seq != wantSeq {
						t.Errorf("record %d: got seq %d, want %d", i, r.Seq, wantSeq)
					}
					if !r.Time.Equal(clk.Now()) {
						t.Errorf("record %d: got time %v, want %v", i, r.Time, clk.Now())
					}
					if r.Kind != batch[i].Kind || r.Cause != batch[i].Cause || r.Resource != batch[i].Resource || !bytes.Equal(r.Payload, batch[i].Payload) {
						t.Errorf("record %d: got %+v, want the caller's fields of %+v", i, r, batch[i])
					}
				}
				want = append(want, out...)
			}
			for _, w := range want {
				got, ok, err := j.Get(w.Seq)
				if err != nil || !ok {
					t.Fatalf("get %d: got ok=%v err=%v, want the record", w.Seq, ok, err)
				}
				if !sameRecord(got, w) {
					t.Errorf("get %d: got %+v, want %+v", w.Seq, got, w)
				}
			}
			if got := info(t, j); got.Head != uint64(len(want)) || got.First != 1 {
				t.Errorf("info: got head %d first %d, want head %d first 1", got.Head, got.First, len(want))
			}
		})
	}
}

func TestAppendDefaultTimeIsNowUTC(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	before := time.Now()
	out := mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	after := time.Now()
	if got := out[0].Time; got.Before(before.Truncate(0)) || got.After(after) || got.Location() != time.UTC {
		t.Errorf("got time %v, want a UTC time within [%v, %v]", got, before, after)
	}
	got, _, err := j.Get(1)
	if err != nil || !got.Time.Equal(out[0].Time) {
		t.Errorf("get 1: got time %v (err %v), want %v", got.Time, err, out[0].Time)
	}
}

func TestAppendEmptyBatch(t *testing.T) {
	j, _ := newJournal(t, journal.Options{Fold: testFold})
	out, err := j.Append()
	if err != nil || len(out) != 0 {
		t.Errorf("append of nothing: got %v, %v, want nothing and no error", out, err)
	}
	if got := info(t, j).Head; got != 0 {
		t.Errorf("got head %d, want 0", got)
	}
}

func TestSeqsGapFreeAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	var total uint64
	for round := range 5 {
		j, err := journal.Open(path, journal.Options{Fold: testFold})
		if err != nil {
			t.Fatalf("round %d: open: %v", round, err)
		}
		if got := info(t, j).Head; got != total {
			t.Fatalf("round %d: got head %d after reopen, want %d", round, got, total)
		}
		for n := 1; n <= 40; n += 3 {
			batch := make([]event.Record, n)
			for i := range batch {
				batch[i] = rec(event.ResourceApplied, 0, fmt.Sprintf("file:/r%d", i%4), `{"action":"unchanged"}`)
			}
			out := mustAppend(t, j, batch...)
			if got, want := out[0].Seq, total+1; got != want {
				t.Fatalf("round %d: got first seq %d, want %d", round, got, want)
			}
			total += uint64(n)
		}
		if err := j.Close(); err != nil {
			t.Fatalf("round %d: close: %v", round, err)
		}
	}
	j := openAt(t, path, journal.Options{Fold: testFold})
	recs := scanAll(t, j, 0, 0)
	if got, want := seqsOf(recs), seqRange(1, total); !equalSeqs(got, want) {
		t.Fatalf("got %s, want %s", short(got), short(want))
	}
	proj, head, err := projectionOf(j)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustFold(t, nil, recs); head != total || !bytes.Equal(proj, want) {
		t.Errorf("projection: got %s at %d, want %s at %d", proj, head, want, total)
	}
}

func TestAppendRefused(t *testing.T) {
	good := rec(event.LinkUp, 0, "", `{"broker":"nats://x"}`)
	tests := []struct {
		name  string
		batch []event.Record
	}{
		{"cause is own seq", []event.Record{rec(event.ReconcileStarted, 4, "", "")}},
		{"cause after own seq", []event.Record{rec(event.ReconcileStarted, 9, "", "")}},
		{"cause is own seq late in batch", []event.Record{good, good, rec(event.ResourceApplied, 6, "file:/x", "")}},
		{"empty kind", []event.Record{good, rec("", 0, "", "")}},
		{"kind with NUL", []event.Record{good, rec("link\x00up", 0, "", "")}},
		{"kind not UTF-8", []event.Record{good, rec("link.\xff", 0, "", "")}},
		{"kind too long", []event.Record{good, rec(event.Kind(strings.Repeat("k", 4097)), 0, "", "")}},
		{"resource with NUL", []event.Record{good, rec(event.ResourceApplied, 0, "file:/a\x00b", "")}},
		{"resource not UTF-8", []event.Record{good, rec(event.ResourceApplied, 0, "file:/\xc3\x28", "")}},
		{"payload not JSON", []event.Record{good, rec(event.ResourceApplied, 0, "file:/a", `{"action":`)}},
		{"payload two JSON values", []event.Record{good, rec(event.ResourceApplied, 0, "file:/a", `{} {}`)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, _ := newJournal(t, journal.Options{Fold: testFold})
			before := mustAppend(t, j, good, good, good)
			projBefore, _, _ := projectionOf(j)

			out, err := j.Append(tt.batch...)
			if !errors.Is(err, journal.ErrInvalid) {
				t.Fatalf("got %v, %v, want ErrInvalid", out, err)
			}
			if out != nil {
				t.Errorf("got records %v with the error, want none", out)
			}
			if got := seqsOf(scanAll(t, j, 0, 0)); !equalSeqs(got, seqsOf(before)) {
				t.Errorf("after refusal: got %v stored, want %v", got, seqsOf(before))
			}
			if got := info(t, j).Head; got != 3 {
				t.Errorf("after refusal: got head %d, want 3", got)
			}
			if proj, head, _ := projectionOf(j); !bytes.Equal(proj, projBefore) || head != 3 {
				t.Errorf("after refusal: got projection %s at %d, want %s at 3", proj, head, projBefore)
			}
			for _, name := range []string{"file:/x", "file:/a"} {
				if _, ok, _ := j.LatestFor(name); ok {
					t.Errorf("after refusal: resource %q is indexed, want nothing", name)
				}
			}
			// The next good record still gets the next sequence.
			if out := mustAppend(t, j, rec(event.ReconcileStarted, 3, "", "")); out[0].Seq != 4 {
				t.Errorf("after refusal: got seq %d, want 4", out[0].Seq)
			}
		})
	}
}

func TestAppendCauseAccepted(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	// A cause may point at the previous record, even one in the same batch.
	out := mustAppend(t, j, rec(event.ReconcileStarted, 1, "", ""), rec(event.ResourceApplied, 2, "file:/a", ""))
	if got, want := []uint64{out[0].Cause, out[1].Cause}, []uint64{1, 2}; !reflect.DeepEqual(got, want) {
		t.Errorf("got causes %v, want %v", got, want)
	}
}

func TestAppendFoldErrorStoresNothing(t *testing.T) {
	fail := false
	fold := func(prev []byte, recs []event.Record) ([]byte, error) {
		if fail {
			return nil, errors.New("projection is broken")
		}
		return blobFold(prev, recs)
	}
	j, _ := newJournal(t, journal.Options{Fold: foldInto(fold)})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	fail = true
	if _, err := j.Append(rec(event.LinkDown, 0, "", "")); err == nil || !strings.Contains(err.Error(), "projection is broken") {
		t.Fatalf("got %v, want the fold's error", err)
	}
	if got := seqsOf(scanAll(t, j, 0, 0)); !equalSeqs(got, []uint64{1}) {
		t.Errorf("got %v stored, want [1]", got)
	}
}

func TestScanRanges(t *testing.T) {
	const n = 20000 // more than two scan chunks of 8192
	j, _ := newJournal(t, journal.Options{})
	batch := make([]event.Record, 0, 1000)
	for i := 0; i < n; i++ {
		batch = append(batch, rec(event.ResourceApplied, 0, "file:/a", `{"action":"unchanged"}`))
		if len(batch) == cap(batch) {
			mustAppend(t, j, batch...)
			batch = batch[:0]
		}
	}
	tests := []struct {
		from, to uint64
		want     []uint64
	}{
		{0, 0, seqRange(1, n)},
		{1, 0, seqRange(1, n)},
		{5, 10, seqRange(5, 10)},
		{7, 7, []uint64{7}},
		{0, 8192, seqRange(1, 8192)},
		{1, 8193, seqRange(1, 8193)},
		{8192, 8193, []uint64{8192, 8193}},
		{8190, 16390, seqRange(8190, 16390)},
		{2, 16385, seqRange(2, 16385)},
		{16384, 0, seqRange(16384, n)},
		{n, 0, []uint64{n}},
		{n - 5, n + 100, seqRange(n-5, n)},
		{n + 1, 0, nil},
		{10, 5, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%d", tt.from, tt.to), func(t *testing.T) {
			if got := seqsOf(scanAll(t, j, tt.from, tt.to)); !equalSeqs(got, tt.want) {
				t.Errorf("got %s, want %s", short(got), short(tt.want))
			}
		})
	}

	t.Run("fn error stops", func(t *testing.T) {
		stop := errors.New("enough")
		var seen int
		err := j.Scan(0, 0, func(r event.Record) error {
			seen++
			if r.Seq == 9000 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || seen != 9000 {
			t.Errorf("got err %v after %d records, want %v after 9000", err, seen, stop)
		}
	})
}

func TestScanKindAndResource(t *testing.T) {
	kinds := []event.Kind{event.ResourceApplied, event.DriftObserved, "future.kind", event.ResourceApplied}
	// Names chosen to trip a prefix match: "file:/a" must not find "file:/a/b"
	// or "file:/ab".
	resources := []string{"file:/a", "file:/a/b", "", "file:/ab", "file:/a"}
	j, _ := newJournal(t, journal.Options{})
	var all []event.Record
	for i := 0; i < 300; i++ {
		all = append(all, mustAppend(t, j, rec(kinds[i%len(kinds)], 0, resources[i%len(resources)], `{}`))...)
	}
	want := func(keep func(event.Record) bool, from uint64) []uint64 {
		var s []uint64
		for _, r := range all {
			if r.Seq >= from && keep(r) {
				s = append(s, r.Seq)
			}
		}
		return s
	}
	collect := func(scan func(func(event.Record) error) error) []uint64 {
		var got []event.Record
		if err := scan(func(r event.Record) error { got = append(got, r); return nil }); err != nil {
			t.Fatal(err)
		}
		for _, r := range got {
			if !sameRecord(r, all[r.Seq-1]) {
				t.Errorf("record %d: got %+v, want %+v", r.Seq, r, all[r.Seq-1])
			}
		}
		return seqsOf(got)
	}

	for _, k := range []event.Kind{event.ResourceApplied, event.DriftObserved, "future.kind", event.HostStarted} {
		for _, from := range []uint64{0, 1, 2, 150, 299, 300, 301} {
			t.Run(fmt.Sprintf("kind %s from %d", k, from), func(t *testing.T) {
				got := collect(func(fn func(event.Record) error) error { return j.ScanKind(k, from, fn) })
				if w := want(func(r event.Record) bool { return r.Kind == k }, from); !equalSeqs(got, w) {
					t.Errorf("got %s, want %s", short(got), short(w))
				}
			})
		}
	}
	for _, res := range []string{"file:/a", "file:/a/b", "file:/ab", "file:/", "file:/zz"} {
		for _, from := range []uint64{0, 1, 3, 150, 300, 301} {
			t.Run(fmt.Sprintf("resource %s from %d", res, from), func(t *testing.T) {
				got := collect(func(fn func(event.Record) error) error { return j.ScanResource(res, from, fn) })
				if w := want(func(r event.Record) bool { return r.Resource == res }, from); !equalSeqs(got, w) {
					t.Errorf("got %s, want %s", short(got), short(w))
				}
			})
		}
	}
}

func TestLatestFor(t *testing.T) {
	const big = 20000 // more than two index chunks of 8192
	j, _ := newJournal(t, journal.Options{})
	latest := map[string]uint64{}
	var batch []event.Record
	flush := func() {
		for _, r := range mustAppend(t, j, batch...) {
			latest[r.Resource] = r.Seq
		}
		batch = batch[:0]
	}
	batch = append(batch, rec(event.ResourceApplied, 0, "file:/early", `{}`))
	for i := 0; i < big; i++ {
		batch = append(batch, rec(event.ResourceApplied, 0, "file:/big", `{}`))
		if i%7 == 0 {
			batch = append(batch, rec(event.ResourceApplied, 0, "file:/big/child", `{}`))
		}
		if len(batch) >= 1000 {
			flush()
		}
	}
	batch = append(batch, rec(event.ResourceApplied, 0, "file:/bigger", `{}`), rec(event.LinkUp, 0, "", ""))
	flush()

	tests := []struct {
		resource string
		want     uint64 // 0 for none
	}{
		{"file:/big", latest["file:/big"]},
		{"file:/big/child", latest["file:/big/child"]},
		{"file:/bigger", latest["file:/bigger"]},
		{"file:/early", 1},
		{"file:/bi", 0},
		{"file:/none", 0},
		{"file:/zzz", 0},
		{"", 0},
	}
	for _, tt := range tests {
		t.Run(tt.resource, func(t *testing.T) {
			r, ok, err := j.LatestFor(tt.resource)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want == 0 {
				if ok {
					t.Errorf("got record %d, want none", r.Seq)
				}
				return
			}
			if !ok || r.Seq != tt.want || r.Resource != tt.resource {
				t.Errorf("got %d %q (ok %v), want %d %q", r.Seq, r.Resource, ok, tt.want, tt.resource)
			}
		})
	}

	t.Run("scan resource across chunks", func(t *testing.T) {
		var got []uint64
		if err := j.ScanResource("file:/big", 0, func(r event.Record) error {
			if r.Resource != "file:/big" {
				t.Fatalf("record %d: got resource %q, want file:/big", r.Seq, r.Resource)
			}
			got = append(got, r.Seq)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != big || got[len(got)-1] != latest["file:/big"] {
			t.Fatalf("got %s, want %d records ending at %d", short(got), big, latest["file:/big"])
		}
		for i := 1; i < len(got); i++ {
			if got[i] <= got[i-1] {
				t.Fatalf("got %d after %d, want ascending", got[i], got[i-1])
			}
		}
	})
}

func TestChain(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	mustAppend(t, j,
		rec(event.DeclarationReceived, 0, "", ""),      // 1
		rec(event.ReconcileStarted, 1, "", ""),         // 2
		rec(event.DriftObserved, 0, "file:/a", ""),     // 3
		rec(event.ResourceApplied, 2, "file:/a", ""),   // 4
		rec(event.ReconcileCompleted, 4, "", ""),       // 5
		rec(event.ResourceApplied, 3, "file:/a", ""),   // 6
		rec(event.ReconcileCompleted, 2, "", ""),       // 7
		rec("future.kind", 6, "file:/a", `{"x":true}`), // 8
	)
	tests := []struct {
		seq  uint64
		want []uint64
	}{
		{5, []uint64{5, 4, 2, 1}},
		{8, []uint64{8, 6, 3}},
		{7, []uint64{7, 2, 1}},
		{3, []uint64{3}},
		{1, []uint64{1}},
		{0, nil},
		{99, nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.seq), func(t *testing.T) {
			chain, err := j.Chain(tt.seq)
			if err != nil {
				t.Fatal(err)
			}
			if got := seqsOf(chain); !equalSeqs(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFollow(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	for range 5 {
		mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	}

	tests := []struct {
		from uint64
		want []uint64
	}{
		{0, seqRange(1, 25)},
		{1, seqRange(1, 25)},
		{4, seqRange(4, 25)},
		{7, seqRange(7, 25)},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type follower struct {
		got  chan uint64
		done chan error
	}
	followers := make([]follower, len(tests))
	for i, tt := range tests {
		f := follower{got: make(chan uint64, 100), done: make(chan error, 1)}
		followers[i] = f
		go func() {
			f.done <- j.Follow(ctx, tt.from, func(r event.Record) error {
				f.got <- r.Seq
				return nil
			})
		}()
	}
	// Append from another goroutine, some while followers are still
	// reading what was there.
	appended := make(chan error, 1)
	go func() {
		for i := range 20 {
			if _, err := j.Append(rec(event.LinkDown, uint64(i+1), "", "")); err != nil {
				appended <- err
				return
			}
		}
		appended <- nil
	}()
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	for i, tt := range tests {
		var got []uint64
		timeout := time.After(10 * time.Second)
		for len(got) < len(tt.want) {
			select {
			case s := <-followers[i].got:
				got = append(got, s)
			case err := <-followers[i].done:
				t.Fatalf("from %d: follow returned %v after %v", tt.from, err, got)
			case <-timeout:
				t.Fatalf("from %d: got %v, want %s", tt.from, got, short(tt.want))
			}
		}
		if !equalSeqs(got, tt.want) {
			t.Errorf("from %d: got %s, want %s", tt.from, short(got), short(tt.want))
		}
	}
	cancel()
	for i, tt := range tests {
		select {
		case err := <-followers[i].done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("from %d: got %v after cancel, want context.Canceled", tt.from, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("from %d: follow did not return after cancel", tt.from)
		}
		select {
		case s := <-followers[i].got:
			t.Errorf("from %d: got extra record %d", tt.from, s)
		default:
		}
	}
}

func TestFollowStopsOnClose(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	got := make(chan uint64, 10)
	done := make(chan error, 1)
	go func() {
		done <- j.Follow(context.Background(), 0, func(r event.Record) error {
			got <- r.Seq
			return nil
		})
	}()
	select {
	case s := <-got:
		if s != 1 {
			t.Fatalf("got %d, want 1", s)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not deliver the existing record")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, journal.ErrClosed) {
			t.Errorf("got %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not return after close")
	}
	if err := j.Follow(context.Background(), 0, func(event.Record) error { return nil }); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("follow after close: got %v, want ErrClosed", err)
	}
	if _, err := j.Append(rec(event.LinkUp, 0, "", "")); !errors.Is(err, journal.ErrClosed) {
		t.Errorf("append after close: got %v, want ErrClosed", err)
	}
}

func TestFollowFnErrorStops(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""), rec(event.LinkUp, 0, "", ""))
	stop := errors.New("stop")
	var seen []uint64
	err := j.Follow(context.Background(), 0, func(r event.Record) error {
		seen = append(seen, r.Seq)
		return stop
	})
	if !errors.Is(err, stop) || !equalSeqs(seen, []uint64{1}) {
		t.Errorf("got %v after %v, want %v after [1]", err, seen, stop)
	}
}

func TestFoldHook(t *testing.T) {
	type call struct {
		prev []byte
		recs []uint64
		out  []byte
	}
	var calls []call
	fold := func(prev []byte, recs []event.Record) ([]byte, error) {
		out, err := blobFold(prev, recs)
		calls = append(calls, call{bytes.Clone(prev), seqsOf(recs), out})
		return out, err
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(path, journal.Options{Fold: foldInto(fold)})
	if err != nil {
		t.Fatal(err)
	}
	if proj, head, err := projectionOf(j); proj != nil || head != 0 || err != nil {
		t.Errorf("empty journal: got projection %q at %d (%v), want none at 0", proj, head, err)
	}
	batches := [][]event.Record{
		{rec(event.LinkUp, 0, "", "")},
		{rec(event.ReconcileStarted, 1, "", ""), rec(event.ResourceApplied, 2, "file:/a", ""), rec(event.ReconcileCompleted, 2, "", "")},
		{rec("future.kind", 0, "", `[1,2]`)},
	}
	var all []event.Record
	for i, b := range batches {
		all = append(all, mustAppend(t, j, b...)...)
		proj, head, err := projectionOf(j)
		if err != nil {
			t.Fatal(err)
		}
		if len(calls) != i+1 {
			t.Fatalf("after batch %d: got %d fold calls, want %d", i, len(calls), i+1)
		}
		if !bytes.Equal(proj, calls[i].out) || head != uint64(len(all)) {
			t.Errorf("after batch %d: got projection %s at %d, want %s at %d", i, proj, head, calls[i].out, len(all))
		}
	}
	start := uint64(0)
	for i, c := range calls {
		var wantPrev []byte
		if i > 0 {
			wantPrev = calls[i-1].out
		}
		if !bytes.Equal(c.prev, wantPrev) {
			t.Errorf("call %d: got prev %s, want %s", i, c.prev, wantPrev)
		}
		want := seqRange(start+1, start+uint64(len(batches[i])))
		if !equalSeqs(c.recs, want) {
			t.Errorf("call %d: got records %v, want %v", i, c.recs, want)
		}
		start += uint64(len(batches[i]))
	}
	if want := mustFold(t, nil, all); !bytes.Equal(calls[len(calls)-1].out, want) {
		t.Errorf("got projection %s, want the fold of every record %s", calls[len(calls)-1].out, want)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}

	// After a reopen the hook continues from the stored projection.
	j = openAt(t, path, journal.Options{Fold: foldInto(fold)})
	last := calls[len(calls)-1].out
	all = append(all, mustAppend(t, j, rec(event.LinkDown, 0, "", ""))...)
	if got := calls[len(calls)-1].prev; !bytes.Equal(got, last) {
		t.Errorf("after reopen: got prev %s, want %s", got, last)
	}
	proj, head, _ := projectionOf(j)
	if want := mustFold(t, nil, all); !bytes.Equal(proj, want) || head != 6 {
		t.Errorf("after reopen: got projection %s at %d, want %s at 6", proj, head, want)
	}
}

// startHolder runs the test binary as a child that holds the journal at path
// and returns once it says it has it.
func startHolder(t *testing.T, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHold+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("holder: %v: %s", err, stderr.String())
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		if strings.TrimSpace(line) != "ready" {
			t.Fatalf("holder said %q, want ready (stderr: %s)", line, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("holder did not get ready")
	}
}

func TestOpenLockedByAnotherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	startHolder(t, path)
	// The holder's own compaction copy, which a refused Open must not touch.
	leftover := path + ".compacting"
	if err := os.WriteFile(leftover, []byte("in progress"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("readonly=%v", readOnly), func(t *testing.T) {
			j, err := journal.Open(path, journal.Options{Timeout: 200 * time.Millisecond, ReadOnly: readOnly})
			if err == nil {
				j.Close()
				t.Fatal("open succeeded, want ErrLocked")
			}
			if !errors.Is(err, journal.ErrLocked) {
				t.Fatalf("got %v, want ErrLocked", err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("got message %q, want it to name %s", err, path)
			}
			if errors.Is(err, journal.ErrCorrupt) {
				t.Errorf("got %v, want it not to say corrupt", err)
			}
		})
	}
	if _, err := os.Stat(leftover); err != nil {
		t.Errorf("a refused open removed the holder's %s: %v", leftover, err)
	}
}

func TestOpenReadOnlyMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "journal.db")
	j, err := journal.Open(path, journal.Options{ReadOnly: true})
	if err == nil {
		j.Close()
		t.Fatal("open succeeded, want ErrNotExist")
	}
	if !errors.Is(err, journal.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("got %v, want ErrNotExist naming %s", err, path)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("read-only open created %s (stat: %v)", path, err)
	}
}

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	w, err := journal.Open(path, journal.Options{Fold: testFold})
	if err != nil {
		t.Fatal(err)
	}
	stored := mustAppend(t, w, rec(event.LinkUp, 0, "", ""), rec(event.ResourceApplied, 1, "file:/a", `{}`))
	w.Close()

	// Two readers at once share the file.
	r1 := openAt(t, path, journal.Options{ReadOnly: true})
	r2 := openAt(t, path, journal.Options{ReadOnly: true})
	for i, r := range []*journal.Journal{r1, r2} {
		got := scanAll(t, r, 0, 0)
		if len(got) != 2 || !sameRecord(got[0], stored[0]) || !sameRecord(got[1], stored[1]) {
			t.Errorf("reader %d: got %+v, want %+v", i, got, stored)
		}
		if proj, head, _ := projectionOf(r); head != 2 || !bytes.Equal(proj, mustFold(t, nil, stored)) {
			t.Errorf("reader %d: got projection %s at %d", i, proj, head)
		}
	}
	if _, err := r1.Append(rec(event.LinkUp, 0, "", "")); err == nil {
		t.Error("append to a read-only journal succeeded")
	}
}

func TestUnknownKindKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(path, journal.Options{Fold: testFold})
	if err != nil {
		t.Fatal(err)
	}
	in := rec("future.kind", 0, "future:thing", `{"new_field":[1,2,{"x":"y"}]}`)
	out := mustAppend(t, j, rec(event.LinkUp, 0, "", ""), in)
	j.Close()

	j = openAt(t, path, journal.Options{Fold: testFold})
	got, ok, err := j.Get(2)
	if err != nil || !ok {
		t.Fatalf("get 2: ok %v, err %v", ok, err)
	}
	if got.Kind != in.Kind || got.Resource != in.Resource || !bytes.Equal(got.Payload, in.Payload) || !sameRecord(got, out[1]) {
		t.Errorf("got %+v, want %+v", got, out[1])
	}
	if _, err := got.DecodePayload(); !errors.Is(err, event.ErrUnknownKind) {
		t.Errorf("decode payload: got %v, want ErrUnknownKind", err)
	}
	var kinds []uint64
	if err := j.ScanKind("future.kind", 0, func(r event.Record) error { kinds = append(kinds, r.Seq); return nil }); err != nil {
		t.Fatal(err)
	}
	if !equalSeqs(kinds, []uint64{2}) {
		t.Errorf("scan kind: got %v, want [2]", kinds)
	}
	if r, ok, _ := j.LatestFor("future:thing"); !ok || r.Seq != 2 {
		t.Errorf("latest for: got %d (ok %v), want 2", r.Seq, ok)
	}
}

func TestMarkAcked(t *testing.T) {
	j, _ := newJournal(t, journal.Options{})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""), rec(event.LinkUp, 0, "", ""), rec(event.LinkUp, 0, "", ""))
	tests := []struct {
		mark    uint64
		wantErr bool
		want    uint64
	}{
		{2, false, 2},
		{1, false, 2}, // never backwards
		{3, false, 3},
		{4, true, 3}, // past head
	}
	for _, tt := range tests {
		err := j.MarkAcked(tt.mark)
		if (err != nil) != tt.wantErr {
			t.Errorf("mark %d: got err %v, want error %v", tt.mark, err, tt.wantErr)
		}
		if got := info(t, j).Acked; got != tt.want {
			t.Errorf("mark %d: got acked %d, want %d", tt.mark, got, tt.want)
		}
	}
}

// A mark noted rides the next append: nothing is committed for it alone,
// and what the append commits survives a reopen.
func TestNoteAckedRidesTheNextAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openAt(t, path, journal.Options{})
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""), rec(event.LinkUp, 0, "", ""), rec(event.LinkUp, 0, "", ""))
	j.NoteAcked(2)
	if got := info(t, j).Acked; got != 0 {
		t.Fatalf("noted 2, no append since: acked %d, want 0", got)
	}
	mustAppend(t, j, rec(event.LinkDown, 0, "", ""))
	if got := info(t, j).Acked; got != 2 {
		t.Fatalf("after an append: acked %d, want 2", got)
	}
	j.NoteAcked(1) // never backwards
	mustAppend(t, j, rec(event.LinkDown, 0, "", ""))
	if got := info(t, j).Acked; got != 2 {
		t.Errorf("noted 1 after 2: acked %d, want 2", got)
	}
	j.NoteAcked(5)
	mustAppend(t, j, rec(event.LinkDown, 0, "", ""))
	j.Close()
	j = openAt(t, path, journal.Options{})
	if got := info(t, j).Acked; got != 5 {
		t.Errorf("reopened: acked %d, want 5", got)
	}
	j.NoteAcked(9) // past the head of 6: not carried
	mustAppend(t, j, rec(event.LinkDown, 0, "", ""))
	if got := info(t, j).Acked; got != 5 {
		t.Errorf("noted 9 past the head of 6: acked %d, want 5", got)
	}
}

// A Fold may hand back prev untouched: it aliases the file's pages, which
// the journal must copy before they move.
func TestFoldReturnsPrev(t *testing.T) {
	fold := func(prev []byte, recs []event.Record) ([]byte, error) {
		if prev != nil && recs[0].Kind == event.LinkUp {
			return prev, nil
		}
		return blobFold(prev, recs)
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openAt(t, path, journal.Options{Fold: foldInto(fold)})
	mustAppend(t, j, rec(event.LinkDown, 0, "", ""))
	want, _, _ := projectionOf(j)
	pad := strings.Repeat("p", 1000)
	for i := range 2000 { // enough to grow the file and move the map
		mustAppend(t, j, rec(event.LinkUp, 0, "", fmt.Sprintf(`{"i":%d,"p":%q}`, i, pad)))
	}
	got, head, err := projectionOf(j)
	if err != nil || head != 2001 || !bytes.Equal(got, want) {
		t.Errorf("got projection %s at %d (%v), want %s at 2001", got, head, err, want)
	}
}

// Check reads everything: it passes on a sound journal, compacted or not,
// and names a damaged record that Open could not see.
func TestCheck(t *testing.T) {
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	j, path := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	for i := range 50 {
		mustAppend(t, j, rec(event.LinkUp, 0, "", fmt.Sprintf(`{"broker":"needle-%03d"}`, i)))
	}
	if err := j.Check(); err != nil {
		t.Fatalf("sound journal: %v", err)
	}
	clk.mu.Lock()
	clk.t = clk.t.Add(200 * 24 * time.Hour)
	clk.mu.Unlock()
	if _, err := j.Compact(journal.CompactOptions{KeepLast: 10}); err != nil {
		t.Fatal(err)
	}
	if err := j.Check(); err != nil {
		t.Fatalf("compacted journal: %v", err)
	}
	j.Close()

	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	needle := []byte("needle-045")
	for i := bytes.Index(b, needle); i >= 0; {
		b[i+len(needle)-1] ^= 0x01
		next := bytes.Index(b[i+1:], needle)
		if next < 0 {
			break
		}
		i += next + 1
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	j = openAt(t, path, journal.Options{Fold: testFold})
	if err := j.Check(); !errors.Is(err, journal.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Errorf("damaged record: got %v, want ErrCorrupt naming %s", err, path)
	}
}

// An error from the system (here a directory where the file should be) is
// not damage: it is reported as it is, without the move-aside advice.
func TestOpenSystemErrorIsNotCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := journal.Open(path, journal.Options{})
	if err == nil || errors.Is(err, journal.ErrCorrupt) || !strings.Contains(err.Error(), "open journal "+path) {
		t.Errorf("got %v, want a plain open error naming %s", err, path)
	}
}

// TestAppendedHook: Options.Appended is told of every committed append,
// documents or not, with the records as stored, and of nothing that was
// not stored.
func TestAppendedHook(t *testing.T) {
	fail := false
	fold := func(prev []byte, recs []event.Record) ([]byte, error) {
		if fail {
			return nil, errors.New("projection is broken")
		}
		return blobFold(prev, recs)
	}
	var told [][]event.Record
	j, _ := newJournal(t, journal.Options{Fold: foldInto(fold), Appended: func(recs []event.Record) {
		told = append(told, slices.Clone(recs))
	}})
	first := mustAppend(t, j, rec(event.LinkUp, 0, "", ""), rec(event.DriftObserved, 0, "file:/etc/x", `{"differs":["mode"]}`))
	second, err := j.AppendDocuments([][]byte{[]byte("doc")}, rec(event.ResourceApplied, 0, "file:/etc/x", `{"action":"updated"}`))
	if err != nil {
		t.Fatal(err)
	}
	fail = true
	if _, err := j.Append(rec(event.LinkDown, 0, "", "")); err == nil {
		t.Fatal("an append the fold refused was stored")
	}
	if _, err := j.Append(rec("", 0, "", "")); err == nil {
		t.Fatal("an invalid record was stored")
	}
	if len(told) != 2 {
		t.Fatalf("told of %d appends, want 2 (the two committed)", len(told))
	}
	for i, want := range [][]event.Record{first, second} {
		if len(told[i]) != len(want) {
			t.Fatalf("append %d: told of %d records, want %d", i+1, len(told[i]), len(want))
		}
		for k := range want {
			if !sameRecord(told[i][k], want[k]) {
				t.Errorf("append %d record %d: told %+v, want %+v", i+1, k, told[i][k], want[k])
			}
		}
	}
}
