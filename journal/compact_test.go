package journal_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

var (
	agedKinds     = []event.Kind{event.ResourceApplied, event.DriftObserved, "future.kind"}
	agedResources = []string{"file:/a", "file:/b", "", "file:/a/b"}
)

// appendAged appends n records one hour apart on clk, and leaves clk one hour
// after the last: record i (from 1) is (n+1-i) hours old.
func appendAged(t *testing.T, j *journal.Journal, clk *clock, n int) []event.Record {
	t.Helper()
	var all []event.Record
	for i := range n {
		r := rec(agedKinds[i%len(agedKinds)], 0, agedResources[i%len(agedResources)], fmt.Sprintf(`{"i":%d}`, i))
		if i > 0 && i%5 == 0 {
			r.Cause = uint64(i) // the previous record
		}
		all = append(all, mustAppend(t, j, r)...)
		clk.Advance(time.Hour)
	}
	return all
}

// wantThrough is the rule, restated: the longest run of records from the
// first that are all older than the window, outside the newest keepLast, and
// (with requireAck) acknowledged.
func wantThrough(recs []event.Record, now time.Time, o journal.CompactOptions, acked uint64) uint64 {
	head := recs[len(recs)-1].Seq
	var through uint64
	for _, r := range recs {
		if !r.Time.Before(now.Add(-o.Window)) || r.Seq+o.KeepLast > head || (o.RequireAck && r.Seq > acked) {
			break
		}
		through = r.Seq
	}
	return through
}

func TestCompactDrops(t *testing.T) {
	const n = 100
	tests := []struct {
		name  string
		opts  journal.CompactOptions
		acked uint64
		want  uint64
	}{
		{"window decides", journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 10}, 0, 76},
		{"window edge is kept", journal.CompactOptions{Window: 24*time.Hour + 1, KeepLast: 10}, 0, 76},
		{"keep last decides", journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 50}, 0, 50},
		{"keep last one", journal.CompactOptions{Window: time.Hour, KeepLast: 1}, 0, 99},
		{"keep last is head", journal.CompactOptions{Window: time.Hour, KeepLast: n}, 0, 0},
		{"nothing old enough", journal.CompactOptions{Window: 200 * time.Hour, KeepLast: 1}, 0, 0},
		{"defaults keep everything", journal.CompactOptions{}, 0, 0},
		{"ack decides", journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 10, RequireAck: true}, 30, 30},
		{"nothing acked", journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 10, RequireAck: true}, 0, 0},
		{"acked past window", journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 10, RequireAck: true}, 95, 76},
		{"ack ignored without RequireAck", journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 10}, 3, 76},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			path := filepath.Join(t.TempDir(), "journal.db")
			j, err := journal.Open(path, journal.Options{Fold: testFold, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { j.Close() }()
			all := appendAged(t, j, clk, n)
			if tt.acked > 0 {
				if err := j.MarkAcked(tt.acked); err != nil {
					t.Fatal(err)
				}
			}
			o := tt.opts
			if o.Window == 0 {
				o.Window = journal.DefaultWindow
			}
			if o.KeepLast == 0 {
				o.KeepLast = journal.DefaultKeepLast
			}
			if model := wantThrough(all, clk.Now(), o, tt.acked); model != tt.want {
				t.Fatalf("test table says %d, the rule says %d", tt.want, model)
			}

			res, err := j.Compact(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			if res.Through != tt.want || res.Dropped != tt.want {
				t.Errorf("got through %d dropped %d, want %d and %d", res.Through, res.Dropped, tt.want, tt.want)
			}
			if tt.opts.RequireAck && res.Through > tt.acked {
				t.Errorf("dropped through %d, past the acknowledged %d", res.Through, tt.acked)
			}
			checkCompacted(t, j, all, tt.want)

			// Reopen: the compacted journal is whole and head continues.
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			if j, err = journal.Open(path, journal.Options{Fold: testFold, Now: clk.Now}); err != nil {
				t.Fatalf("reopen after compaction: %v", err)
			}
			wantHead := uint64(n)
			if tt.want > 0 {
				wantHead++ // the journal.compacted record
			}
			out := mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
			if out[0].Seq != wantHead+1 {
				t.Errorf("after reopen: got seq %d, want %d", out[0].Seq, wantHead+1)
			}
			if snap, seq, _ := snapshotOf(j); seq != tt.want || (tt.want > 0 && !bytes.Equal(snap, mustFold(t, nil, all[:tt.want]))) {
				t.Errorf("after reopen: got snapshot %s at %d, want the fold through %d", snap, seq, tt.want)
			}
			if got := info(t, j).First; got != tt.want+1 {
				t.Errorf("after reopen: got first %d, want %d", got, tt.want+1)
			}
		})
	}
}

// checkCompacted checks j after a compaction through `through` of the
// records all (appended before it).
func checkCompacted(t *testing.T, j *journal.Journal, all []event.Record, through uint64) {
	t.Helper()
	head := all[len(all)-1].Seq
	survivors := all[through:]
	if through > 0 {
		// The compaction appends its own record.
		r, ok, err := j.Get(head + 1)
		if err != nil || !ok {
			t.Fatalf("get %d: ok %v err %v, want the journal.compacted record", head+1, ok, err)
		}
		var p event.JournalCompactedPayload
		if r.Kind != event.JournalCompacted || json.Unmarshal(r.Payload, &p) != nil || p.Through != through || p.Dropped != through {
			t.Errorf("got %s %s, want journal.compacted through %d dropped %d", r.Kind, r.Payload, through, through)
		}
		survivors = append(survivors[:len(survivors):len(survivors)], r)
	}

	in := info(t, j)
	wantHead, wantFirst := head, uint64(1)
	if through > 0 {
		wantHead, wantFirst = head+1, through+1
	}
	if in.Head != wantHead || in.First != wantFirst || in.SnapshotSeq != through {
		t.Errorf("info: got head %d first %d snapshot %d, want %d %d %d", in.Head, in.First, in.SnapshotSeq, wantHead, wantFirst, through)
	}
	for _, r := range all {
		_, ok, err := j.Get(r.Seq)
		if err != nil || ok != (r.Seq > through) {
			t.Errorf("get %d: got ok %v err %v, want ok %v", r.Seq, ok, err, r.Seq > through)
		}
	}
	if got, want := seqsOf(scanAll(t, j, 0, 0)), seqsOf(survivors); !equalSeqs(got, want) {
		t.Errorf("scan: got %s, want %s", short(got), short(want))
	}

	// The snapshot is the fold of exactly the dropped records.
	snap, seq, err := snapshotOf(j)
	if err != nil {
		t.Fatal(err)
	}
	var wantSnap []byte
	if through > 0 {
		wantSnap = mustFold(t, nil, all[:through])
	}
	if seq != through || !bytes.Equal(snap, wantSnap) {
		t.Errorf("snapshot: got %s at %d, want %s at %d", snap, seq, wantSnap, through)
	}
	// Replaying the survivors on the snapshot gives the stored projection.
	proj, projHead, err := projectionOf(j)
	if err != nil {
		t.Fatal(err)
	}
	if replay := mustFold(t, snap, survivors); !bytes.Equal(proj, replay) || projHead != wantHead {
		t.Errorf("projection: got %s at %d, want the replay from the snapshot %s at %d", proj, projHead, replay, wantHead)
	}

	// Index entries of dropped records are gone with them.
	scanned := func(scan func(func(event.Record) error) error) []uint64 {
		var got []uint64
		if err := scan(func(r event.Record) error { got = append(got, r.Seq); return nil }); err != nil {
			t.Fatalf("index scan: %v", err)
		}
		return got
	}
	filter := func(keep func(event.Record) bool) []uint64 {
		var s []uint64
		for _, r := range survivors {
			if keep(r) {
				s = append(s, r.Seq)
			}
		}
		return s
	}
	for _, k := range append(agedKinds, event.JournalCompacted) {
		got := scanned(func(fn func(event.Record) error) error { return j.ScanKind(k, 0, fn) })
		if want := filter(func(r event.Record) bool { return r.Kind == k }); !equalSeqs(got, want) {
			t.Errorf("scan kind %s: got %s, want %s", k, short(got), short(want))
		}
	}
	for _, res := range agedResources[:2] {
		got := scanned(func(fn func(event.Record) error) error { return j.ScanResource(res, 0, fn) })
		want := filter(func(r event.Record) bool { return r.Resource == res })
		if !equalSeqs(got, want) {
			t.Errorf("scan resource %s: got %s, want %s", res, short(got), short(want))
		}
		latest, ok, err := j.LatestFor(res)
		if err != nil || ok != (len(want) > 0) || (ok && latest.Seq != want[len(want)-1]) {
			t.Errorf("latest for %s: got %d ok %v err %v, want %v", res, latest.Seq, ok, err, want)
		}
	}
	// A chain stops where its causes were compacted away.
	if through > 0 && through < head {
		chain, err := j.Chain(head)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range chain {
			if r.Seq <= through {
				t.Errorf("chain of %d: got dropped record %d", head, r.Seq)
			}
		}
	}
}

func TestCompactTwice(t *testing.T) {
	clk := newClock()
	j, _ := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	all := appendAged(t, j, clk, 60)
	o := journal.CompactOptions{Window: 24 * time.Hour, KeepLast: 5}
	res, err := j.Compact(o)
	if err != nil || res.Through != 36 {
		t.Fatalf("first compaction: got through %d, %v, want 36", res.Through, err)
	}
	compacted, _, _ := j.Get(61)
	all = append(all, compacted)
	all = append(all, appendAged(t, j, clk, 40)...)
	// Now 101 records, the clock at hour 100; 61 and 62 were appended at
	// hour 60 and record k > 61 at hour k-2, so up to 77 are older than a day.
	res, err = j.Compact(o)
	if err != nil || res.Through != 77 || res.Dropped != 41 {
		t.Fatalf("second compaction: got through %d dropped %d, %v, want 77 and 41", res.Through, res.Dropped, err)
	}
	snap, seq, _ := snapshotOf(j)
	if want := mustFold(t, nil, all[:77]); seq != 77 || !bytes.Equal(snap, want) {
		t.Errorf("got snapshot %s at %d, want %s at 77", snap, seq, want)
	}
	if got := seqsOf(scanAll(t, j, 0, 0)); !equalSeqs(got, seqRange(78, 102)) {
		t.Errorf("got %s, want 78..102", short(got))
	}
}

func TestCompactNeverDropsUnacked(t *testing.T) {
	clk := newClock()
	j, _ := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	appendAged(t, j, clk, 50)
	o := journal.CompactOptions{Window: time.Hour, KeepLast: 1, RequireAck: true}
	for _, acked := range []uint64{0, 7, 7, 20, 49, 50} {
		if acked > 0 {
			if err := j.MarkAcked(acked); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := j.Compact(o); err != nil {
			t.Fatal(err)
		}
		first := info(t, j).First
		if first == 0 || first > acked+1 {
			t.Errorf("acked %d: got first record %d, want at most %d", acked, first, acked+1)
		}
		for seq := acked + 1; seq <= 50; seq++ {
			if _, ok, err := j.Get(seq); !ok || err != nil {
				t.Errorf("acked %d: record %d is gone (err %v)", acked, seq, err)
			}
		}
	}
}

func TestCompactReturnsSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 200k records")
	}
	const (
		n        = 200_000
		keepLast = 1000
	)
	clk := newClock()
	j, path := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	pad := strings.Repeat("x", 178)
	payload := func(i int) string { return fmt.Sprintf(`{"i":"%07d","p":"%s"}`, i, pad) }
	if got := len(payload(0)); got != 200 {
		t.Fatalf("payload is %d bytes, want 200", got)
	}
	batch := make([]event.Record, 0, 10_000)
	for i := range n {
		batch = append(batch, rec(agedKinds[i%3], 0, fmt.Sprintf("file:/r%d", i%100), payload(i)))
		if len(batch) == cap(batch) {
			mustAppend(t, j, batch...)
			batch = batch[:0]
		}
	}
	clk.Advance(2 * time.Hour)

	start := time.Now()
	res, err := j.Compact(journal.CompactOptions{Window: time.Hour, KeepLast: keepLast})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted %d of %d records in %s: %d bytes before, %d after",
		res.Dropped, n, time.Since(start).Round(time.Millisecond), res.SizeBefore, res.SizeAfter)
	if res.Through != n-keepLast || res.Dropped != n-keepLast {
		t.Errorf("got through %d dropped %d, want %d", res.Through, res.Dropped, n-keepLast)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != res.SizeAfter {
		t.Errorf("file is %d bytes, result says %d", fi.Size(), res.SizeAfter)
	}
	// 1% of the records are left; allow the file ten times that.
	if res.SizeAfter*10 > res.SizeBefore {
		t.Errorf("got %d bytes after, want under a tenth of the %d before", res.SizeAfter, res.SizeBefore)
	}
	if got := seqsOf(scanAll(t, j, 0, 0)); !equalSeqs(got, seqRange(n-keepLast+1, n+1)) {
		t.Errorf("got %s, want %d..%d", short(got), n-keepLast+1, n+1)
	}
	var byKind int
	if err := j.ScanKind(agedKinds[0], 0, func(event.Record) error { byKind++; return nil }); err != nil {
		t.Fatal(err)
	}
	if want := keepLast / 3; byKind < want || byKind > want+1 {
		t.Errorf("scan kind: got %d records, want about %d", byKind, want)
	}
	if out := mustAppend(t, j, rec(event.LinkUp, 0, "", "")); out[0].Seq != n+2 {
		t.Errorf("after compaction: got seq %d, want %d", out[0].Seq, n+2)
	}
}

func TestCompactWhileFollowingAndAppending(t *testing.T) {
	clk := newClock()
	j, _ := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	appendAged(t, j, clk, 200)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan uint64, 1000)
	followed := make(chan error, 1)
	go func() {
		followed <- j.Follow(ctx, 150, func(r event.Record) error {
			got <- r.Seq
			return nil
		})
	}()
	appended := make(chan error, 1)
	go func() {
		for range 100 {
			if _, err := j.Append(rec(event.LinkUp, 0, "", "")); err != nil {
				appended <- err
				return
			}
		}
		appended <- nil
	}()
	res, err := j.Compact(journal.CompactOptions{Window: time.Hour, KeepLast: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	if res.Through < 100 {
		t.Errorf("got through %d, want at least 100", res.Through)
	}
	head := info(t, j).Head
	if head != 301 {
		t.Fatalf("got head %d, want 301", head)
	}
	next := uint64(150)
	timeout := time.After(10 * time.Second)
	for next <= head {
		select {
		case s := <-got:
			if s != next {
				t.Fatalf("follow: got %d, want %d", s, next)
			}
			next++
		case err := <-followed:
			t.Fatalf("follow returned %v at %d", err, next)
		case <-timeout:
			t.Fatalf("follow: stuck before %d of %d", next, head)
		}
	}
	cancel()
	if err := <-followed; !errors.Is(err, context.Canceled) {
		t.Errorf("follow: got %v, want context.Canceled", err)
	}
	all := scanAll(t, j, 0, 0)
	snap, _, _ := snapshotOf(j)
	proj, _, _ := projectionOf(j)
	if replay := mustFold(t, snap, all); !bytes.Equal(proj, replay) {
		t.Errorf("got projection %s, want the replay %s", proj, replay)
	}
}

func TestOpenRemovesLeftoverCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := journal.Open(path, journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, j, rec(event.LinkUp, 0, "", ""))
	j.Close()
	leftover := path + ".compacting"
	if err := os.WriteFile(leftover, bytes.Repeat([]byte{0xAB}, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}

	j = openAt(t, path, journal.Options{})
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("got stat %v for %s after open, want it removed", err, leftover)
	}
	if got := info(t, j).Head; got != 1 {
		t.Errorf("got head %d, want 1", got)
	}
}

// Compactions started together (a timer's and an operator's) must not fold a
// snapshot over records another one has already dropped.
func TestCompactConcurrent(t *testing.T) {
	clk := newClock()
	j, _ := newJournal(t, journal.Options{Fold: testFold, Now: clk.Now})
	var all []event.Record
	batch := make([]event.Record, 0, 1000)
	for i := range 30_000 {
		batch = append(batch, rec(agedKinds[i%3], 0, agedResources[i%4], `{}`))
		if len(batch) == cap(batch) {
			all = append(all, mustAppend(t, j, batch...)...)
			batch = batch[:0]
		}
	}
	clk.Advance(2 * time.Hour)
	errs := make(chan error, 4)
	for _, keep := range []uint64{25_000, 20_000, 10_000, 1000} {
		go func() {
			_, err := j.Compact(journal.CompactOptions{Window: time.Hour, KeepLast: keep})
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	in := info(t, j)
	snap, seq, _ := snapshotOf(j)
	var dropped []event.Record
	for _, r := range all {
		if r.Seq <= seq {
			dropped = append(dropped, r)
		}
	}
	if want := mustFold(t, nil, dropped); !bytes.Equal(snap, want) {
		t.Errorf("got snapshot %s at %d, want the fold of records 1..%d %s", snap, seq, seq, want)
	}
	if in.First != seq+1 {
		t.Errorf("got first %d, want %d, after the snapshot at %d", in.First, seq+1, seq)
	}
	proj, _, _ := projectionOf(j)
	if replay := mustFold(t, snap, scanAll(t, j, seq+1, 0)); !bytes.Equal(proj, replay) {
		t.Errorf("got projection %s, want the replay from the snapshot %s", proj, replay)
	}
}

// A journal without a Fold compacts too, with an empty snapshot.
func TestCompactWithoutFold(t *testing.T) {
	clk := newClock()
	j, path := newJournal(t, journal.Options{Now: clk.Now})
	appendAged(t, j, clk, 50)
	res, err := j.Compact(journal.CompactOptions{Window: time.Hour, KeepLast: 10})
	if err != nil || res.Through != 40 {
		t.Fatalf("got through %d, %v, want 40", res.Through, err)
	}
	if snap, seq, _ := snapshotOf(j); len(snap) != 0 || seq != 40 {
		t.Errorf("got snapshot %q at %d, want none at 40", snap, seq)
	}
	j.Close()
	j = openAt(t, path, journal.Options{Now: clk.Now})
	if got := seqsOf(scanAll(t, j, 0, 0)); !equalSeqs(got, seqRange(41, 51)) {
		t.Errorf("got %s, want 41..51", short(got))
	}
}
