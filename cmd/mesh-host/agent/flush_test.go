package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/journal/event"
)

// stagingDriver is memDriver staging its applies, each staged change able
// to flush itself; it records every call of the staged changes.
type stagingDriver struct {
	*memDriver
	failFlush map[string]error
	// beforeCommit, if set, runs before each commit.
	beforeCommit func(id string)
}

func (d *stagingDriver) Stage(_ context.Context, s drivers.Spec) (drivers.Pending, error) {
	return &flushingPending{d: d, spec: s}, nil
}

type flushingPending struct {
	d    *stagingDriver
	spec drivers.Spec
}

func (p *flushingPending) note(what string) {
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	*p.d.calls = append(*p.d.calls, what+" "+drivers.ID(p.spec))
}

func (p *flushingPending) FlushStaged() error {
	p.note("flush-staged")
	return p.d.failFlush[p.spec.Key()]
}

func (p *flushingPending) Commit() (drivers.Action, error) {
	if p.d.beforeCommit != nil {
		p.d.beforeCommit(drivers.ID(p.spec))
	}
	p.note("commit")
	p.d.mu.Lock()
	defer p.d.mu.Unlock()
	p.d.state[p.spec.Key()] = drivers.SpecDigest(p.spec)
	return drivers.Created, nil
}

func (p *flushingPending) FlushCommitted() error { p.note("flush-committed"); return nil }
func (p *flushingPending) Abort()                { p.note("abort") }

// newStagingBed is a bed whose files stage, over a real root for SyncFS.
func newStagingBed(t *testing.T) (*bed, *stagingDriver) {
	b := newBed(t)
	sd := &stagingDriver{memDriver: b.drv[drivers.KindFile], failFlush: map[string]error{}}
	b.rc.Drivers[drivers.KindFile] = sd
	root, err := rootfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b.rc.Root = root
	return b, sd
}

func files(n int) []drivers.Spec {
	var specs []drivers.Spec
	for i := range n {
		specs = append(specs, file(fmt.Sprintf("/etc/f%03d", i), "x"))
	}
	return specs
}

func callsOf(calls []string, prefix string) int {
	n := 0
	for _, c := range calls {
		if strings.HasPrefix(c, prefix+" ") {
			n++
		}
	}
	return n
}

// A few staged files are each flushed before their commit and after it;
// more than flushEachMax are not (the filesystem is flushed instead).
func TestFewStagedFilesFlushEach(t *testing.T) {
	b, _ := newStagingBed(t)
	b.reconcile(event.TriggerManual, files(3)...)
	for i := range 3 {
		id := fmt.Sprintf("file:/etc/f%03d", i)
		order := []int{slices.Index(b.calls, "flush-staged "+id), slices.Index(b.calls, "commit "+id), slices.Index(b.calls, "flush-committed "+id)}
		if order[0] < 0 || !slices.IsSorted(order) {
			t.Errorf("%s: flush, commit, flush at %v of %q; want all, in that order", id, order, b.calls)
		}
	}

	b, _ = newStagingBed(t)
	b.reconcile(event.TriggerManual, files(flushEachMax+1)...)
	if commits, flushes := callsOf(b.calls, "commit"), callsOf(b.calls, "flush-staged")+callsOf(b.calls, "flush-committed"); commits != flushEachMax+1 || flushes != 0 {
		t.Errorf("%d staged files: %d commits, %d flushes of one file; want %d, 0", flushEachMax+1, commits, flushes, flushEachMax+1)
	}
}

// A staged file whose bytes cannot be flushed is aborted, not committed,
// and fails; the others are committed.
func TestUnflushedFileIsNotCommitted(t *testing.T) {
	b, sd := newStagingBed(t)
	specs := files(2)
	sd.failFlush[specs[0].Key()] = errors.New("disk on fire")
	res := b.reconcile(event.TriggerManual, specs...)
	id := drivers.ID(specs[0])
	if slices.Contains(b.calls, "commit "+id) || !slices.Contains(b.calls, "abort "+id) {
		t.Errorf("calls %q: want %s aborted, never committed", b.calls, id)
	}
	for _, s := range res.Steps {
		switch want := event.ActionCreate; {
		case s.ID == id && (s.Outcome != event.ActionFailed || s.Err == nil || !strings.Contains(s.Err.Error(), "disk on fire")):
			t.Errorf("%s: outcome %s, err %v; want failed with the flush's error", s.ID, s.Outcome, s.Err)
		case s.ID != id && s.Outcome != want:
			t.Errorf("%s: outcome %s; want %s", s.ID, s.Outcome, want)
		}
	}
}

// countingJournal notes each Append among the drivers' calls.
type countingJournal struct {
	Appender
	b *bed
}

func (c countingJournal) Append(recs ...event.Record) ([]event.Record, error) {
	kinds := make([]string, len(recs))
	for i, r := range recs {
		kinds[i] = string(r.Kind)
	}
	c.b.calls = append(c.b.calls, "append "+strings.Join(kinds, ","))
	return c.Appender.Append(recs...)
}

// A level's outcomes are journaled before the next level acts; the last
// level's go with the completion, in one transaction.
func TestLastOutcomesCommitWithTheCompletion(t *testing.T) {
	b := newBed(t)
	b.rc.Journal = countingJournal{Appender: b.rc.Journal, b: b}
	b.reconcile(event.TriggerManual, dir("/etc"), file("/etc/a", "x"))
	want := []string{
		"append reconcile.started",
		"apply directory:/etc",
		"append resource.applied",
		"apply file:/etc/a",
		"append resource.applied,reconcile.completed",
	}
	if !slices.Equal(b.calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(b.calls, "\n"), strings.Join(want, "\n"))
	}
}

// appendSizes notes how many records each Append carries; appends come
// from the reconcile and from its journaling ahead at once.
type appendSizes struct {
	Appender
	mu     sync.Mutex
	sizes  []int
	refuse int // refuse the append of this index (1-based; 0: none)
}

func (a *appendSizes) Append(recs ...event.Record) ([]event.Record, error) {
	a.mu.Lock()
	a.sizes = append(a.sizes, len(recs))
	n := len(a.sizes)
	a.mu.Unlock()
	if n == a.refuse {
		return nil, errors.New("disk full")
	}
	return a.Appender.Append(recs...)
}

// A level of more files than OutcomesPerAppend journals their outcomes,
// that many a transaction, while it goes on staging and committing the
// rest; what is left goes with the completion. Each file has one outcome
// record, before the completion.
func TestOutcomesJournaledAhead(t *testing.T) {
	b, sd := newStagingBed(t)
	b.rc.OutcomesPerAppend = 10
	b.rc.StageBatch = 5
	sizes := &appendSizes{Appender: b.rc.Journal}
	b.rc.Journal = sizes
	// The level's last file waits to be committed until outcomes are
	// journaled: they are journaled while the level goes on, or never.
	last := drivers.ID(files(45)[44])
	sd.beforeCommit = func(id string) {
		if id != last {
			return
		}
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			sizes.mu.Lock()
			n := len(sizes.sizes)
			sizes.mu.Unlock()
			if n > 1 {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Error("no outcome was journaled before the level's last commit")
	}
	res := b.reconcile(event.TriggerManual, files(45)...)
	if want := []int{1, 10, 10, 10, 10, 6}; !slices.Equal(sizes.sizes, want) {
		t.Errorf("appends of %v records, want %v", sizes.sizes, want)
	}
	seqs := map[uint64]bool{}
	for _, s := range res.Steps {
		if s.Outcome != event.ActionCreate || s.Seq == 0 || s.Seq >= res.Completed || seqs[s.Seq] {
			t.Errorf("%s: %s at #%d (completed #%d): want created, once, before the completion", s.ID, s.Outcome, s.Seq, res.Completed)
		}
		seqs[s.Seq] = true
	}
	applied := map[string]int{}
	for _, r := range b.records() {
		if r.Kind == event.ResourceApplied {
			applied[r.Resource]++
			if r.Cause != res.Started {
				t.Errorf("%s caused by #%d, want #%d", r.Resource, r.Cause, res.Started)
			}
		}
	}
	if len(applied) != 45 {
		t.Errorf("%d files have outcome records, want 45", len(applied))
	}
	for id, n := range applied {
		if n != 1 {
			t.Errorf("%s: %d outcome records", id, n)
		}
	}
	if s := b.state(); s.Pending != nil || s.LastReconcile == nil || s.LastReconcile.Result != event.ResultConverged {
		t.Errorf("after it: pending %+v, last %+v", s.Pending, s.LastReconcile)
	}
}

// An outcome transaction journaled ahead that the journal refuses ends
// the reconcile as failed, with the reason, as one at the level's end.
func TestRefusedOutcomesAheadEndTheReconcile(t *testing.T) {
	b, _ := newStagingBed(t)
	b.rc.OutcomesPerAppend = 10
	b.rc.Journal = &appendSizes{Appender: b.rc.Journal, refuse: 3}
	_, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Revision: 1, Specs: files(45), Repair: true})
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("got %v, want the journal's refusal", err)
	}
	s := b.state()
	if s.Pending != nil || s.LastReconcile == nil || s.LastReconcile.Result != event.ResultFailed {
		t.Errorf("after it: pending %+v, last %+v; want it ended, failed", s.Pending, s.LastReconcile)
	}
}
