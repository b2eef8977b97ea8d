package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// memDriver keeps resources in a map, records the order of its calls, and
// fails the keys it is told to. The reconciler's logic is what is under test
// here; the real drivers pass driverstest in their own packages.
type memDriver struct {
	mu    sync.Mutex
	kind  drivers.Kind
	state map[string]string // key → spec digest applied
	fail  map[string]error
	calls *[]string
}

// PathOf and IsDirectory make memDriver a drivers.Nested for the kinds
// that lie at a path, as the real ones are: what it holds is ordered after
// a declared directory.
func (d *memDriver) PathOf(s drivers.Spec) string {
	switch d.kind {
	case drivers.KindFile, drivers.KindDirectory, drivers.KindArchive:
		return s.Key()
	}
	return ""
}

func (d *memDriver) IsDirectory(drivers.Spec) bool {
	return d.kind == drivers.KindDirectory || d.kind == drivers.KindArchive
}

var _ drivers.Nested = (*memDriver)(nil)

func (d *memDriver) Observe(_ context.Context, s drivers.Spec) (drivers.Observation, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	got, ok := d.state[s.Key()]
	if !ok {
		return drivers.Observation{Differs: []string{"absent"}}, nil
	}
	if got != drivers.SpecDigest(s) {
		return drivers.Observation{Exists: true, Differs: []string{"content"}, Seen: got}, nil
	}
	return drivers.Observation{Exists: true, InSync: true, Seen: got}, nil
}

func (d *memDriver) Apply(_ context.Context, s drivers.Spec) (drivers.Action, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	*d.calls = append(*d.calls, "apply "+drivers.ID(s))
	if err := d.fail[s.Key()]; err != nil {
		return "", err
	}
	old, ok := d.state[s.Key()]
	d.state[s.Key()] = drivers.SpecDigest(s)
	switch {
	case !ok:
		return drivers.Created, nil
	case old != drivers.SpecDigest(s):
		return drivers.Updated, nil
	}
	return drivers.Unchanged, nil
}

func (d *memDriver) Remove(_ context.Context, s drivers.Spec) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	*d.calls = append(*d.calls, "remove "+drivers.ID(s))
	if err := d.fail[s.Key()]; err != nil {
		return err
	}
	delete(d.state, s.Key())
	return nil
}

type bed struct {
	t     testing.TB
	j     *journal.Journal
	rc    *Reconciler
	drv   map[drivers.Kind]*memDriver
	calls []string
}

func newBed(t testing.TB) *bed {
	t.Helper()
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Fold: new(projector.Stored).Fold})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	b := &bed{t: t, j: j, drv: map[drivers.Kind]*memDriver{}}
	m := map[drivers.Kind]drivers.Driver{}
	for _, k := range []drivers.Kind{drivers.KindFile, drivers.KindDirectory, drivers.KindPackage, drivers.KindUnit, drivers.KindArchive} {
		d := &memDriver{kind: k, state: map[string]string{}, fail: map[string]error{}, calls: &b.calls}
		b.drv[k], m[k] = d, d
	}
	b.rc = &Reconciler{Journal: j, Drivers: m, Parallel: 4, Now: time.Now}
	return b
}

func (b *bed) state() projector.State {
	b.t.Helper()
	var s projector.State
	err := b.j.Projection(func(v journal.View, _ uint64) error {
		var err error
		s, err = projector.Load(v)
		return err
	})
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

func (b *bed) reconcile(trigger event.Trigger, specs ...drivers.Spec) *Result {
	b.t.Helper()
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: trigger, Revision: 1, Specs: specs, Owned: OwnedMap(b.state().Owned), Repair: true})
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

func (b *bed) records() []event.Record {
	b.t.Helper()
	var out []event.Record
	if err := b.j.Scan(1, 0, func(r event.Record) error { out = append(out, r); return nil }); err != nil {
		b.t.Fatal(err)
	}
	return out
}

func file(p, content string) drivers.Spec { return &drivers.FileSpec{Path: p, Content: content} }
func dir(p string) drivers.Spec           { return &drivers.DirectorySpec{Path: p} }
func pkg(n string) drivers.Spec           { return &drivers.PackageSpec{Name: n} }
func unit(n string) drivers.Spec          { return &drivers.UnitSpec{Name: n, Content: "[Unit]\n"} }

func TestDependencyOrder(t *testing.T) {
	b := newBed(t)
	b.rc.Parallel = 1 // one at a time, so the calls' order is the levels' order
	b.reconcile(event.TriggerManual,
		unit("app.service"), file("/etc/app/conf.d/a.conf", "a"), dir("/etc/app/conf.d"), pkg("nginx"), dir("/etc/app"))
	want := []string{"apply directory:/etc/app", "apply directory:/etc/app/conf.d", "apply package:nginx",
		"apply file:/etc/app/conf.d/a.conf", "apply unit:app.service"}
	if !slices.Equal(b.calls, want) {
		t.Errorf("got calls\n%s\nwant\n%s", strings.Join(b.calls, "\n"), strings.Join(want, "\n"))
	}

	// Undeclaring everything removes in the reverse order.
	b.calls = nil
	b.reconcile(event.TriggerManual)
	want = []string{"remove unit:app.service", "remove file:/etc/app/conf.d/a.conf", "remove package:nginx",
		"remove directory:/etc/app/conf.d", "remove directory:/etc/app"}
	if !slices.Equal(b.calls, want) {
		t.Errorf("got calls\n%s\nwant\n%s", strings.Join(b.calls, "\n"), strings.Join(want, "\n"))
	}
	if owned := b.state().Owned; len(owned) != 0 {
		t.Errorf("after removing everything the host still owns %v", owned)
	}
}

func TestOneFailureDoesNotStopTheRest(t *testing.T) {
	b := newBed(t)
	b.drv[drivers.KindPackage].fail["nginx"] = errors.New("E: Unable to locate package nginx")
	res := b.reconcile(event.TriggerManual, pkg("nginx"), file("/etc/motd", "hi"), unit("app.service"))
	if res.Failed != 1 || res.Changed != 2 {
		t.Errorf("got %d changed, %d failed; want 2 changed, 1 failed", res.Changed, res.Failed)
	}
	s := b.state()
	var outcome event.ResourceAppliedPayload
	for _, r := range b.records() {
		if r.Kind == event.ResourceApplied && r.Resource == "package:nginx" {
			_ = json.Unmarshal(r.Payload, &outcome)
		}
	}
	if outcome.Action != event.ActionFailed || !strings.Contains(outcome.Error, "Unable to locate") {
		t.Errorf("got package outcome %+v, want failed with the tool's message", outcome)
	}
	// Never applied, so not owned: removing it later has nothing to do.
	if o, owned := s.Owned["package:nginx"]; owned {
		t.Errorf("a package that failed to install is owned: %+v", o)
	}
	if s.LastReconcile.Result != event.ResultFailed {
		t.Errorf("got result %s, want failed", s.LastReconcile.Result)
	}
}

// The host removes only what it owns: an undeclared resource it never
// applied is not touched.
func TestRemovesOnlyWhatItOwns(t *testing.T) {
	b := newBed(t)
	b.drv[drivers.KindFile].state["/etc/foreign"] = "someone else's"
	b.reconcile(event.TriggerManual, file("/etc/motd", "hi"))
	b.reconcile(event.TriggerManual)
	if _, ok := b.drv[drivers.KindFile].state["/etc/foreign"]; !ok {
		t.Error("a file the host never owned was removed")
	}
	if _, ok := b.drv[drivers.KindFile].state["/etc/motd"]; ok {
		t.Error("an owned file no longer declared was kept")
	}
}

// A resource Release says to leave (a host version directory) is disowned
// when no longer declared, journaled as released, and never removed.
func TestReleasedIsDisownedAndLeftInPlace(t *testing.T) {
	b := newBed(t)
	b.rc.Release = func(id string) bool { return strings.HasPrefix(id, "directory:/opt/mesh-host/versions/") }
	v1, v2 := dir("/opt/mesh-host/versions/aaa"), dir("/opt/mesh-host/versions/bbb")
	b.reconcile(event.TriggerManual, v1, file("/etc/motd", "hi"))
	res := b.reconcile(event.TriggerManual, v2)
	outcomes := map[string]event.Action{}
	for _, s := range res.Steps {
		outcomes[s.ID] = s.Outcome
	}
	want := map[string]event.Action{"directory:/opt/mesh-host/versions/aaa": event.ActionReleased, "directory:/opt/mesh-host/versions/bbb": event.ActionCreate, "file:/etc/motd": event.ActionDelete}
	if !maps.Equal(outcomes, want) {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	if _, ok := b.drv[drivers.KindDirectory].state["/opt/mesh-host/versions/aaa"]; !ok {
		t.Error("a released version directory was removed")
	}
	if _, owned := b.state().Owned["directory:/opt/mesh-host/versions/aaa"]; owned {
		t.Error("a released resource is still owned")
	}
	// Released once: the next reconcile does not mention it again.
	res = b.reconcile(event.TriggerTimer, v2)
	for _, s := range res.Steps {
		if s.ID == "directory:/opt/mesh-host/versions/aaa" {
			t.Errorf("released again: %+v", s)
		}
	}
}

// A removal its driver leaves in place (drivers.ErrLeftInPlace), with no
// foresight of it in the plan, is released as it happens: journaled with
// why, disowned, and not failed again at the next reconcile.
func TestLeftInPlaceIsReleased(t *testing.T) {
	b := newBed(t)
	b.reconcile(event.TriggerManual, dir("/srv/data"), file("/etc/motd", "hi"))
	left := fmt.Errorf("remove directory /srv/data: directory not empty: it holds entries the host does not own, so it is %w", drivers.ErrLeftInPlace)
	b.drv[drivers.KindDirectory].fail["/srv/data"] = left
	res := b.reconcile(event.TriggerManual, file("/etc/motd", "hi"))
	if res.Failed != 0 {
		t.Errorf("%d failed, want none", res.Failed)
	}
	var rec *event.Record
	for _, r := range b.records() {
		if r.Kind == event.ResourceApplied && r.Resource == "directory:/srv/data" {
			rec = &r
		}
	}
	var p event.ResourceAppliedPayload
	if rec == nil || json.Unmarshal(rec.Payload, &p) != nil || p.Action != event.ActionReleased || p.Note != left.Error() || p.Error != "" {
		t.Fatalf("journaled %+v (%+v), want released with the note %q", rec, p, left)
	}
	if _, owned := b.state().Owned["directory:/srv/data"]; owned {
		t.Error("a resource left in place is still owned")
	}
	res = b.reconcile(event.TriggerTimer, file("/etc/motd", "hi"))
	for _, s := range res.Steps {
		if s.ID == "directory:/srv/data" {
			t.Errorf("tried again: %+v", s)
		}
	}
}

// A timer reconcile that finds nothing appends exactly one small record.
func TestQuietReconcileIsOneRecord(t *testing.T) {
	b := newBed(t)
	var specs []drivers.Spec
	for i := range 100 {
		specs = append(specs, file(fmt.Sprintf("/etc/f%03d", i), "x"))
	}
	b.reconcile(event.TriggerManual, specs...)
	before := len(b.records())
	for range 3 {
		b.reconcile(event.TriggerTimer, specs...)
	}
	recs := b.records()[before:]
	if len(recs) != 3 {
		t.Fatalf("three quiet reconciles appended %d records, want 3", len(recs))
	}
	p, _ := recs[0].DecodePayload()
	if c := p.(*event.ReconcileCompletedPayload); !c.Quiet || c.Unchanged != 100 || c.Trigger != event.TriggerTimer {
		t.Errorf("got %+v, want a quiet completion over 100 unchanged", c)
	}
}

// Drift is journaled, repaired, and the repair's cause is the drift: that
// is what `journal --why` walks back to.
func TestDriftIsJournaledAndRepaired(t *testing.T) {
	b := newBed(t)
	motd := file("/etc/motd", "hello")
	b.reconcile(event.TriggerManual, motd, file("/etc/issue", "x"))
	b.drv[drivers.KindFile].state["/etc/motd"] = "edited by hand"

	res := b.reconcile(event.TriggerTimer, motd, file("/etc/issue", "x"))
	if res.Changed != 1 || res.Unchanged != 1 {
		t.Errorf("got %d changed, %d unchanged; want 1, 1", res.Changed, res.Unchanged)
	}
	latest, ok, err := b.j.LatestFor("file:/etc/motd")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	chain, err := b.j.Chain(latest.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || chain[0].Kind != event.ResourceApplied || chain[1].Kind != event.DriftObserved {
		t.Fatalf("got chain %v, want the repair caused by the drift", kinds(chain))
	}
	if s := b.state(); s.Owned["file:/etc/motd"].Drifted {
		t.Error("the repaired resource is still marked drifted")
	}
}

func TestNoRepairLeavesDrift(t *testing.T) {
	b := newBed(t)
	motd := file("/etc/motd", "hello")
	b.reconcile(event.TriggerManual, motd)
	b.drv[drivers.KindFile].state["/etc/motd"] = "edited by hand"
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Specs: []drivers.Spec{motd}, Owned: OwnedMap(b.state().Owned)})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.drv[drivers.KindFile].state["/etc/motd"]; got != "edited by hand" {
		t.Errorf("--no-repair changed the file to %q", got)
	}
	if !b.state().Owned["file:/etc/motd"].Drifted || res.Changed != 0 {
		t.Errorf("got drifted=%t changed=%d, want the drift journaled and nothing changed", b.state().Owned["file:/etc/motd"].Drifted, res.Changed)
	}
}

// After a crash between the intent and the outcomes, the projection shows a
// pending reconcile, and the next reconcile finishes the job.
func TestNextReconcileFinishesAnInterruptedOne(t *testing.T) {
	b := newBed(t)
	specs := []drivers.Spec{dir("/etc/app"), file("/etc/app/a", "a"), file("/etc/app/b", "b")}
	// The crash: the intent is journaled, one resource applied, no outcome.
	if _, err := b.j.Append(event.New(event.ReconcileStarted, 0, "", event.ReconcileStartedPayload{Trigger: event.TriggerManual, Revision: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := b.drv[drivers.KindDirectory].Apply(context.Background(), specs[0]); err != nil {
		t.Fatal(err)
	}
	if b.state().Pending == nil {
		t.Fatal("an intent without a completion is not shown as pending")
	}
	res := b.reconcile(event.TriggerStart, specs...)
	if res.Changed != 2 || res.Failed != 0 {
		t.Errorf("got %d changed, %d failed; want the two files applied", res.Changed, res.Failed)
	}
	s := b.state()
	if s.Pending != nil || len(s.Owned) != 3 {
		t.Errorf("got pending %+v and %d owned, want none pending and 3 owned (the directory recorded as unchanged)", s.Pending, len(s.Owned))
	}
}

func TestDryRunChangesAndJournalsNothing(t *testing.T) {
	b := newBed(t)
	before := len(b.records())
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Specs: []drivers.Spec{file("/etc/motd", "x")}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Pending() || len(b.calls) != 0 || len(b.records()) != before {
		t.Errorf("dry run: pending=%t calls=%v records %d→%d", res.Pending(), b.calls, before, len(b.records()))
	}
}

func kinds(recs []event.Record) []event.Kind {
	var k []event.Kind
	for _, r := range recs {
		k = append(k, r.Kind)
	}
	return k
}

// absentDriver stands for the package driver with a package declared
// absent and not installed: in sync, and not there.
type absentDriver struct{}

func (absentDriver) Observe(context.Context, drivers.Spec) (drivers.Observation, error) {
	return drivers.Observation{InSync: true}, nil
}

func (absentDriver) Apply(context.Context, drivers.Spec) (drivers.Action, error) {
	return drivers.Unchanged, nil
}

func (absentDriver) Remove(context.Context, drivers.Spec) error { return nil }

// TestPlanOfAnAbsentPackage: a resource in sync that does not exist (a
// package declared absent) is planned unchanged, as apply finds it; it was
// planned "created", and plan exited 3 for ever.
func TestPlanOfAnAbsentPackage(t *testing.T) {
	b := newBed(t)
	b.rc.Drivers[drivers.KindPackage] = absentDriver{}
	gone := &drivers.PackageSpec{Name: "telnetd", State: "absent"}
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Revision: 1, Specs: []drivers.Spec{gone}, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 1 || res.Steps[0].Planned != event.ActionUnchanged {
		t.Errorf("planned %+v, want unchanged", res.Steps[0])
	}
}

// Outcomes the journal refuses after the intent was journaled end the
// reconcile as failed, with the reason; it does not stay in progress for
// every later start to meet the same refusal.
func TestRefusedOutcomesEndTheReconcile(t *testing.T) {
	b := newBed(t)
	long := file("/"+strings.Repeat("a", event.MaxName), "x") // its ID is no journal key
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Revision: 1, Specs: []drivers.Spec{long}, Repair: true})
	if !errors.Is(err, journal.ErrInvalid) {
		t.Fatalf("got %v, want the journal's refusal", err)
	}
	s := b.state()
	if s.Pending != nil {
		t.Errorf("in progress: %+v", s.Pending)
	}
	if s.LastReconcile == nil || s.LastReconcile.Result != event.ResultFailed || s.LastReconcile.Seq != res.Completed {
		t.Fatalf("last reconcile %+v, want failed at #%d", s.LastReconcile, res.Completed)
	}
	recs := b.records()
	var p event.ReconcileCompletedPayload
	if last := recs[len(recs)-1]; last.Kind != event.ReconcileCompleted || last.Cause != res.Started {
		t.Fatalf("last record %s caused by #%d, want reconcile.completed caused by #%d", last.Kind, last.Cause, res.Started)
	} else if err := json.Unmarshal(last.Payload, &p); err != nil || !strings.Contains(p.Error, "journal outcomes") {
		t.Errorf("completion %+v, %v: want the reason", p, err)
	}
}
