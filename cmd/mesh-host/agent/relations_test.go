package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
)

// refreshingUnits is the bed's unit driver with a Refresh: it counts the
// refreshes it is asked for, fails them while told to, and says a unit
// that its Apply (re)started after the change needs none, as the real
// driver does with the manager's start time.
type refreshingUnits struct {
	*memDriver
	refreshed []string
	started   map[string]time.Time
	content   map[string]string
	failing   error
}

// Apply starts a unit it creates and restarts one whose content changed,
// as the real driver does; enablement alone restarts nothing.
func (d *refreshingUnits) Apply(ctx context.Context, s drivers.Spec) (drivers.Action, error) {
	a, err := d.memDriver.Apply(ctx, s)
	content := s.(*drivers.UnitSpec).Content
	d.mu.Lock()
	defer d.mu.Unlock()
	if old, ok := d.content[s.Key()]; err == nil && (!ok || old != content) {
		d.started[s.Key()] = time.Now()
	}
	d.content[s.Key()] = content
	return a, err
}

func (d *refreshingUnits) Refresh(_ context.Context, s drivers.Spec, since time.Time) (drivers.Refreshed, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failing != nil {
		return drivers.Refreshed{}, d.failing
	}
	if at, ok := d.started[s.Key()]; ok && !at.Before(since) {
		return drivers.Refreshed{Note: "started after the change"}, nil
	}
	d.refreshed = append(d.refreshed, s.Key())
	d.started[s.Key()] = time.Now()
	return drivers.Refreshed{Did: "restarted"}, nil
}

func withRefreshingUnits(b *bed) *refreshingUnits {
	u := &refreshingUnits{memDriver: b.drv[drivers.KindUnit], started: map[string]time.Time{}, content: map[string]string{}}
	b.rc.Drivers[drivers.KindUnit] = u
	return u
}

// reconcileAsHost reconciles as the host does: with the projection's
// owed refreshes and the reconcile it shows in progress.
func (b *bed) reconcileAsHost(specs ...drivers.Spec) *Result {
	b.t.Helper()
	s := b.state()
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Revision: 1, Specs: specs,
		Owned: OwnedMap(s.Owned), Repair: true, Owed: s.Refreshes, Interrupted: s.Pending})
	if err != nil {
		b.t.Fatal(err)
	}
	return res
}

func relationKinds(recs []event.Record) []string {
	var out []string
	for _, r := range recs {
		switch r.Kind {
		case event.ResourceApplied, event.RefreshOwed, event.RefreshDone, event.RefreshFailed, event.ResourceSkipped:
			out = append(out, string(r.Kind)+" "+r.Resource)
		}
	}
	return out
}

func since(recs []event.Record, seq uint64) []event.Record {
	return slices.DeleteFunc(slices.Clone(recs), func(r event.Record) bool { return r.Seq <= seq })
}

func notifying(p, content string, targets ...string) drivers.Spec {
	return &drivers.FileSpec{Path: p, Content: content, Relations: drivers.Relations{Notify: targets}}
}

func service(name, content string, rel drivers.Relations) drivers.Spec {
	return &drivers.UnitSpec{Name: name, Content: content, Active: true, Relations: rel}
}

// TestRequiresOrdersAndSkips: a resource is applied after what it
// requires, whatever its kind, and skipped (not failed) when that fails,
// with the failed requirement named; unrelated resources still converge.
func TestRequiresOrdersAndSkips(t *testing.T) {
	b := newBed(t)
	b.rc.Parallel = 1
	b.reconcile(event.TriggerManual,
		&drivers.PackageSpec{Name: "nginx", Relations: drivers.Relations{Requires: []string{"file:/etc/apt/pin"}}},
		file("/etc/apt/pin", "pin"), file("/etc/motd", "hi"))
	if i, j := slices.Index(b.calls, "apply file:/etc/apt/pin"), slices.Index(b.calls, "apply package:nginx"); i < 0 || j < i {
		t.Errorf("got calls %q: the package is applied before the file it requires", b.calls)
	}

	b.drv[drivers.KindPackage].fail["php"] = errors.New("E: Unable to locate package php")
	res := b.reconcile(event.TriggerManual,
		&drivers.PackageSpec{Name: "nginx", Relations: drivers.Relations{Requires: []string{"file:/etc/apt/pin"}}},
		file("/etc/apt/pin", "pin"), file("/etc/motd", "hi"),
		pkg("php"),
		&drivers.FileSpec{Path: "/etc/php.ini", Content: "x", Relations: drivers.Relations{Requires: []string{"package:php"}}},
		&drivers.UnitSpec{Name: "php-fpm.service", Content: "x", Relations: drivers.Relations{Requires: []string{"file:/etc/php.ini"}}},
		file("/etc/unrelated", "u"))
	if res.Failed != 1 || res.Skipped != 2 || res.Changed != 1 {
		t.Errorf("got %d failed, %d skipped, %d changed; want 1, 2, 1", res.Failed, res.Skipped, res.Changed)
	}
	skips := map[string]string{}
	for _, r := range b.records() {
		if r.Kind == event.ResourceSkipped {
			p, _ := r.DecodePayload()
			skips[r.Resource] = p.(*event.ResourceSkippedPayload).Requirement
		}
	}
	want := map[string]string{"file:/etc/php.ini": "package:php", "unit:php-fpm.service": "file:/etc/php.ini"}
	if fmt.Sprint(skips) != fmt.Sprint(want) {
		t.Errorf("got skips %v, want %v", skips, want)
	}
	s := b.state()
	if s.Skipped["file:/etc/php.ini"].Requirement != "package:php" || s.LastReconcile.Result != event.ResultFailed {
		t.Errorf("got skipped %v, result %s; want php.ini skipped for package:php, failed", s.Skipped, s.LastReconcile.Result)
	}
	if _, ok := b.drv[drivers.KindFile].state["/etc/php.ini"]; ok {
		t.Error("a file whose requirement failed was written")
	}

	// Once the requirement applies, so do the skipped.
	delete(b.drv[drivers.KindPackage].fail, "php")
	res = b.reconcile(event.TriggerManual,
		pkg("php"), &drivers.FileSpec{Path: "/etc/php.ini", Content: "x", Relations: drivers.Relations{Requires: []string{"package:php"}}},
		&drivers.UnitSpec{Name: "php-fpm.service", Content: "x", Relations: drivers.Relations{Requires: []string{"file:/etc/php.ini"}}})
	if res.Failed+res.Skipped != 0 || len(b.state().Skipped) != 0 {
		t.Errorf("got %d failed, %d skipped, skips %v after the requirement applied", res.Failed, res.Skipped, b.state().Skipped)
	}
}

// TestMovedDirectoryTakesItsContents: a directory a relation moves later
// than its kind's place (it requires a unit, which comes after files and
// directories otherwise) takes what is declared in it along: the file in
// it is applied after it; a file nothing moves keeps its kind's place.
func TestMovedDirectoryTakesItsContents(t *testing.T) {
	b := newBed(t)
	b.rc.Parallel = 1
	b.reconcile(event.TriggerManual,
		unit("app.service"),
		&drivers.DirectorySpec{Path: "/srv/app", Relations: drivers.Relations{Requires: []string{"unit:app.service"}}},
		file("/srv/app/site.conf", "x"), file("/etc/motd", "hi"))
	at := func(call string) int { return slices.Index(b.calls, call) }
	unitAt, dirAt, fileAt := at("apply unit:app.service"), at("apply directory:/srv/app"), at("apply file:/srv/app/site.conf")
	if unitAt < 0 || dirAt < unitAt || fileAt < dirAt {
		t.Errorf("got calls %q: want the unit, then the directory that requires it, then the file in that directory", b.calls)
	}
	if motd := at("apply file:/etc/motd"); motd < 0 || motd > unitAt {
		t.Errorf("got calls %q: a file that nothing moves is applied in its kind's place, before units", b.calls)
	}
}

// TestRefreshOnceForManySources: three changed files that notify one unit
// owe it three refreshes, each journaled with the change that owes it,
// and it is refreshed once, after all of them; a reconcile that changes
// nothing refreshes nothing and stays one record.
func TestRefreshOnceForManySources(t *testing.T) {
	b := newBed(t)
	u := withRefreshingUnits(b)
	files := func(v string) []drivers.Spec {
		return []drivers.Spec{notifying("/etc/shop/a", v, "unit:shop.service"), notifying("/etc/shop/b", v, "unit:shop.service"),
			&drivers.FileSpec{Path: "/etc/shop/c", Content: v}}
	}
	first := files("1")
	first = append(first, service("shop.service", "[Service]\n", drivers.Relations{Subscribe: []string{"file:/etc/shop/c"}}))
	b.reconcileAsHost(first...)
	if len(u.refreshed) != 0 {
		t.Errorf("a unit started by this reconcile was refreshed again: %q", u.refreshed)
	}
	head := b.state().Head
	second := files("2")
	second = append(second, service("shop.service", "[Service]\n", drivers.Relations{Subscribe: []string{"file:/etc/shop/c"}}))
	res := b.reconcileAsHost(second...)
	if !slices.Equal(u.refreshed, []string{"shop.service"}) {
		t.Errorf("got refreshes %q, want shop.service once", u.refreshed)
	}
	got := relationKinds(since(b.records(), head))
	// Each refresh.owed follows the outcome that owes it; the refresh
	// comes after every source.
	want := []string{
		"resource.applied file:/etc/shop/a", "refresh.owed unit:shop.service",
		"resource.applied file:/etc/shop/b", "refresh.owed unit:shop.service",
		"resource.applied file:/etc/shop/c", "refresh.owed unit:shop.service",
		"refresh.done unit:shop.service",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got records\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if res.Refreshed != 1 || len(b.state().Refreshes) != 0 {
		t.Errorf("got %d refreshed, owed %v; want 1 and none owed", res.Refreshed, b.state().Refreshes)
	}

	head = b.state().Head
	b.reconcileAsHost(second...)
	if recs := since(b.records(), head); len(recs) != 1 || len(u.refreshed) != 1 {
		t.Errorf("an unchanged reconcile wrote %d records and refreshed %q", len(recs), u.refreshed)
	}
}

// TestTargetChangedTooIsRefreshed: a unit whose own spec changed in the
// reconcile its config changed is still refreshed (Salt's watch is not),
// unless its own apply restarted it after the change.
func TestTargetChangedTooIsRefreshed(t *testing.T) {
	b := newBed(t)
	u := withRefreshingUnits(b)
	conf := func(v string) drivers.Spec { return notifying("/etc/app.conf", v, "unit:app.service") }
	b.reconcileAsHost(conf("1"), service("app.service", "1", drivers.Relations{}))

	// The unit's own change (its enablement) does not restart it.
	b.reconcileAsHost(conf("2"), &drivers.UnitSpec{Name: "app.service", Content: "1", Active: true, Enabled: true})
	if !slices.Equal(u.refreshed, []string{"app.service"}) {
		t.Errorf("a unit whose spec changed beside its config was refreshed %q times, want once", u.refreshed)
	}
}

// TestRefreshSurvivesFailureAndCrash: an owed refresh stays owed when its
// delivery fails, when the host stops after journaling the change and
// before delivering, and when a reconcile stopped between the change and
// its outcome; the next reconcile delivers it, once.
func TestRefreshSurvivesFailureAndCrash(t *testing.T) {
	b := newBed(t)
	u := withRefreshingUnits(b)
	specs := func(v string) []drivers.Spec {
		return []drivers.Spec{notifying("/etc/app.conf", v, "unit:app.service"), service("app.service", "1", drivers.Relations{})}
	}
	b.reconcileAsHost(specs("1")...)

	// The delivery fails: owed, and the reconcile failed.
	u.failing = errors.New("job for app.service failed")
	res := b.reconcileAsHost(specs("2")...)
	s := b.state()
	if res.RefreshFailed != 1 || s.LastReconcile.Result != event.ResultFailed || !strings.Contains(s.Refreshes["unit:app.service"].Error, "job for") {
		t.Fatalf("got %d failed refreshes, result %s, owed %+v", res.RefreshFailed, s.LastReconcile.Result, s.Refreshes)
	}
	// Next time nothing changes, and what is owed is delivered.
	u.failing = nil
	b.reconcileAsHost(specs("2")...)
	if !slices.Equal(u.refreshed, []string{"app.service"}) || len(b.state().Refreshes) != 0 {
		t.Errorf("got refreshes %q, owed %v; want app.service once and nothing owed", u.refreshed, b.state().Refreshes)
	}

	// Killed after the change and its refresh.owed were journaled.
	u.refreshed = nil
	start, err := b.j.Append(event.New(event.ReconcileStarted, 0, "", event.ReconcileStartedPayload{Plan: []event.Step{{Resource: "file:/etc/app.conf", Action: event.ActionUpdate}}}))
	if err != nil {
		t.Fatal(err)
	}
	b.drv[drivers.KindFile].state["/etc/app.conf"] = drivers.SpecDigest(specs("3")[0])
	if _, err := b.j.Append(
		event.New(event.ResourceApplied, start[0].Seq, "file:/etc/app.conf", event.ResourceAppliedPayload{Action: event.ActionUpdate, SpecDigest: drivers.SpecDigest(specs("3")[0])}),
		event.New(event.RefreshOwed, start[0].Seq, "unit:app.service", event.RefreshOwedPayload{Source: "file:/etc/app.conf", Change: event.ActionUpdate, Refresh: "restart"}),
	); err != nil {
		t.Fatal(err)
	}
	b.reconcileAsHost(specs("3")...)
	if !slices.Equal(u.refreshed, []string{"app.service"}) {
		t.Errorf("after a kill between the change and the refresh: got refreshes %q, want app.service once", u.refreshed)
	}

	// Killed between the change and its outcome: only the intent says it.
	u.refreshed = nil
	if _, err := b.j.Append(event.New(event.ReconcileStarted, 0, "", event.ReconcileStartedPayload{Plan: []event.Step{{Resource: "file:/etc/app.conf", Action: event.ActionUpdate}}})); err != nil {
		t.Fatal(err)
	}
	b.drv[drivers.KindFile].state["/etc/app.conf"] = drivers.SpecDigest(specs("4")[0])
	head := b.state().Head
	b.reconcileAsHost(specs("4")...)
	if !slices.Equal(u.refreshed, []string{"app.service"}) {
		t.Errorf("after a kill between the change and its outcome: got refreshes %q, want app.service once", u.refreshed)
	}
	var interrupted bool
	for _, r := range since(b.records(), head) {
		if r.Kind == event.RefreshOwed {
			p, _ := r.DecodePayload()
			interrupted = p.(*event.RefreshOwedPayload).Interrupted != 0
		}
	}
	if !interrupted {
		t.Error("the refresh owed for an interrupted reconcile does not say so")
	}

	// A declaration that no longer changes the source still delivers:
	// owed again (a failure), then the file is dropped from the declaration.
	u.refreshed, u.failing = nil, errors.New("failed")
	b.reconcileAsHost(specs("5")...)
	u.failing = nil
	b.reconcileAsHost(service("app.service", "1", drivers.Relations{}))
	if !slices.Equal(u.refreshed, []string{"app.service"}) {
		t.Errorf("a refresh owed by a source no longer declared: got %q, want app.service once", u.refreshed)
	}
}

// TestNoRepairRefreshesNothing: check --no-repair leaves what is owed.
func TestNoRepairRefreshesNothing(t *testing.T) {
	b := newBed(t)
	u := withRefreshingUnits(b)
	if _, err := b.j.Append(event.New(event.RefreshOwed, 0, "unit:app.service", event.RefreshOwedPayload{Source: "file:/a", Change: event.ActionUpdate})); err != nil {
		t.Fatal(err)
	}
	s := b.state()
	if _, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, Specs: []drivers.Spec{service("app.service", "1", drivers.Relations{})},
		Owed: s.Refreshes, Repair: false}); err != nil {
		t.Fatal(err)
	}
	if len(u.refreshed) != 0 || len(b.state().Refreshes) != 1 {
		t.Errorf("check --no-repair refreshed %q, owed %v", u.refreshed, b.state().Refreshes)
	}
}

// TestPlanSaysWhatWouldBeRefreshed: a dry run names each refresh and why,
// and the resources a foreseen failure would skip.
func TestPlanSaysWhatWouldBeRefreshed(t *testing.T) {
	b := newBed(t)
	withRefreshingUnits(b)
	before := len(b.records())
	res, err := b.rc.Reconcile(context.Background(), Request{Trigger: event.TriggerManual, DryRun: true, Specs: []drivers.Spec{
		notifying("/etc/shop/env", "x", "unit:shop.service"), service("shop.service", "1", drivers.Relations{}),
	}, Owed: nil})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refreshes) != 1 || res.Refreshes[0].Target != "unit:shop.service" || res.Refreshes[0].How != "restart" ||
		!slices.Equal(res.Refreshes[0].Why, []string{"file:/etc/shop/env would be created"}) {
		t.Errorf("got refreshes %+v", res.Refreshes)
	}
	if len(b.records()) != before || len(b.drv[drivers.KindFile].state) != 0 {
		t.Error("a dry run journaled or changed something")
	}
}

// BenchmarkRefreshesPerReconcile: N changed files that notify one unit
// owe it N refreshes and restart it once a reconcile; the figure is the
// restarts per reconcile (it must be 1), beside the reconcile's time.
func BenchmarkRefreshesPerReconcile(b *testing.B) {
	for _, n := range []int{1, 10, 100, 1000} {
		b.Run(fmt.Sprintf("sources=%d", n), func(b *testing.B) {
			bd := newBed(b)
			u := withRefreshingUnits(bd)
			specs := func(v int) []drivers.Spec {
				out := []drivers.Spec{service("app.service", "1", drivers.Relations{})}
				for i := range n {
					out = append(out, notifying(fmt.Sprintf("/etc/app/f%d", i), fmt.Sprint(v), "unit:app.service"))
				}
				return out
			}
			bd.reconcileAsHost(specs(0)...)
			u.refreshed = nil
			v := 0
			for b.Loop() {
				v++
				bd.reconcileAsHost(specs(v)...)
			}
			b.ReportMetric(float64(len(u.refreshed))/float64(v), "restarts/reconcile")
		})
	}
}

// batchingUnits is the bed's unit driver as a drivers.BatchApplier: it
// records the batches it is given.
type batchingUnits struct {
	*memDriver
	batches [][]string
}

func (d *batchingUnits) ApplyBatch(ctx context.Context, specs []drivers.Spec) []drivers.Applied {
	var keys []string
	out := make([]drivers.Applied, len(specs))
	for i, s := range specs {
		keys = append(keys, s.Key())
		out[i].Action, out[i].Err = d.Apply(ctx, s)
	}
	d.batches = append(d.batches, keys)
	return out
}

// TestUnitsApplyTogether: the units of a reconcile reach a batching
// driver in one call (so the manager is reloaded once), each with its own
// outcome; a unit that relations put later comes in a batch of its own.
func TestUnitsApplyTogether(t *testing.T) {
	b := newBed(t)
	u := &batchingUnits{memDriver: b.drv[drivers.KindUnit]}
	b.rc.Drivers[drivers.KindUnit] = u
	b.drv[drivers.KindUnit].fail["b.service"] = errors.New("job failed")
	res := b.reconcile(event.TriggerManual, unit("a.service"), unit("b.service"), unit("c.service"),
		&drivers.UnitSpec{Name: "d.service", Content: "x", Relations: drivers.Relations{Requires: []string{"unit:a.service"}}},
		file("/etc/motd", "x"))
	want := [][]string{{"a.service", "b.service", "c.service"}, {"d.service"}}
	if fmt.Sprint(u.batches) != fmt.Sprint(want) {
		t.Errorf("got batches %v, want %v", u.batches, want)
	}
	if res.Failed != 1 || res.Changed != 4 {
		t.Errorf("got %d changed, %d failed; want 4 and 1 (b.service)", res.Changed, res.Failed)
	}
}

func TestDescribeSources(t *testing.T) {
	for _, c := range []struct {
		sources []string
		more    int
		want    string
	}{
		{nil, 0, "a change"},
		{[]string{"a"}, 0, "a changed"},
		{[]string{"a", "b"}, 0, "a and b changed"},
		{[]string{"a", "b", "c"}, 0, "a, b and c changed"},
		{[]string{"a", "b", "c", "d", "e"}, 0, "a, b, c and 2 more changed"},
		{[]string{"a"}, 20, "a and 20 more changed"},
	} {
		if got := describeSources(c.sources, c.more); got != c.want {
			t.Errorf("describeSources(%q, %d) = %q, want %q", c.sources, c.more, got, c.want)
		}
	}
}
