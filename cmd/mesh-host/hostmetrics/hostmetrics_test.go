package hostmetrics_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostmetrics"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/directory"
	"github.com/mesh-host/mesh-host/drivers/file"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/internal/promtest"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
)

// host is a real journal, opened as the service opens it with metrics on,
// and the agent's real reconciler with the real file and directory drivers
// on a root in a temp dir.
type host struct {
	t        *testing.T
	dir      string
	root     string
	j        *journal.Journal
	m        *hostmetrics.Metrics
	rc       *agent.Reconciler
	revision uint64
}

func newHost(t *testing.T) *host {
	t.Helper()
	dir := t.TempDir()
	h := &host{t: t, dir: dir, root: filepath.Join(dir, "root")}
	if err := os.MkdirAll(filepath.Join(h.root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.open()
	return h
}

// open opens the journal (again) with metrics of its own, as a service
// starting does.
func (h *host) open() {
	h.t.Helper()
	if h.j != nil {
		h.j.Close()
	}
	m := hostmetrics.New(hostmetrics.Build{Version: "v9", Label: "test-build"})
	j, err := hostjournal.OpenAppended(filepath.Join(h.dir, "journal.db"), m.Appended)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { j.Close() })
	if err := m.Attach(j); err != nil {
		h.t.Fatal(err)
	}
	root, err := rootfs.Open(h.root)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { root.Close() })
	h.j, h.m = j, m
	h.rc = &agent.Reconciler{Journal: j, Root: root, Now: time.Now, Drivers: map[drivers.Kind]drivers.Driver{
		drivers.KindFile: file.New(root), drivers.KindDirectory: directory.New(root),
	}}
}

// declare journals a declaration of specs, the next revision, as an
// accepted push does, and reconciles to it.
func (h *host) declare(specs ...drivers.Spec) *agent.Result {
	h.t.Helper()
	h.revision++
	recs, err := h.j.Append(event.New(event.DeclarationReceived, 0, "", event.DeclarationReceivedPayload{
		Revision: h.revision, Digest: fmt.Sprintf("sha256:%064x", h.revision), Source: "push", Resources: hostjournal.Declared(specs),
	}))
	if err != nil {
		h.t.Fatal(err)
	}
	return h.reconcile(agent.Request{Trigger: event.TriggerPushed, Cause: recs[0].Seq, Specs: specs, Repair: true})
}

func (h *host) reconcile(req agent.Request) *agent.Result {
	h.t.Helper()
	req.Revision = h.revision
	req.Owned = hostjournal.StoredOwned{J: h.j}
	res, err := h.rc.Reconcile(context.Background(), req)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// gather is what a scrape would say, by series: "name{k=v,...}" → value,
// labels sorted as the exposition sorts them.
func (h *host) gather() map[string]float64 {
	h.t.Helper()
	mfs, err := h.m.Registry().Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	return promtest.Series(mfs)
}

// want checks each series in want against got.
func want(t *testing.T, when string, got map[string]float64, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: no series %s", when, k)
		} else if g != v {
			t.Errorf("%s: got %s %v, want %v", when, k, g, v)
		}
	}
}

func fileSpec(p, content string) drivers.Spec { return &drivers.FileSpec{Path: p, Content: content} }

const (
	intended   = "mesh_host_changes_total{cause=intended,kind=file}"
	corrective = "mesh_host_changes_total{cause=corrective,kind=file}"
	driftFound = "mesh_host_drift_found_total{kind=file}"
)

// TestCorrectiveAndIntended: a drift repaired is one corrective change
// and one drift found; a new declaration that changes one file is one
// intended change; the gauges follow the projection.
func TestCorrectiveAndIntended(t *testing.T) {
	h := newHost(t)
	a, b := fileSpec("/etc/a.conf", "a1\n"), fileSpec("/etc/b.conf", "b1\n")
	h.declare(a, b)
	want(t, "first declaration", h.gather(), map[string]float64{
		intended: 2, corrective: 0, driftFound: 0,
		"mesh_host_reconciles_total{result=converged,trigger=push}": 1,
		"mesh_host_reconcile_duration_seconds_count{trigger=push}":  1,
		"mesh_host_resources{state=owned}":                          2,
		"mesh_host_declaration_revision{which=desired}":             1,
		"mesh_host_declaration_revision{which=last_good}":           1,
		"mesh_host_build_info{label=test-build,version=v9}":         1,
		"mesh_host_link_up{}":                                       0,
		"mesh_host_refresh_owed{}":                                  0,
	})
	if got := h.gather()["mesh_host_last_reconcile_timestamp_seconds{result=converged}"]; got < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last converged reconcile at %v, want about now", got)
	}

	// Drift, repaired by the drift timer's reconcile.
	if err := os.WriteFile(filepath.Join(h.root, "etc/a.conf"), []byte("changed by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.reconcile(agent.Request{Trigger: event.TriggerTimer, Specs: []drivers.Spec{a, b}, Repair: true})
	want(t, "drift repaired", h.gather(), map[string]float64{
		intended: 2, corrective: 1, driftFound: 1,
		"mesh_host_reconciles_total{result=converged,trigger=timer}": 1,
		"mesh_host_resources{state=drifted}":                         0,
	})

	// A new declaration changes b.
	b2 := fileSpec("/etc/b.conf", "b2\n")
	h.declare(a, b2)
	want(t, "b changed", h.gather(), map[string]float64{
		intended: 3, corrective: 1, driftFound: 1,
		"mesh_host_declaration_revision{which=desired}":   2,
		"mesh_host_declaration_revision{which=applied}":   2,
		"mesh_host_declaration_revision{which=last_good}": 2,
	})

	// Drift only observed (check --no-repair): drifted until repaired.
	if err := os.WriteFile(filepath.Join(h.root, "etc/b.conf"), []byte("by hand again\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.reconcile(agent.Request{Trigger: event.TriggerManual, Specs: []drivers.Spec{a, b2}, Repair: false})
	want(t, "drift observed", h.gather(), map[string]float64{
		intended: 3, corrective: 1, driftFound: 2,
		"mesh_host_resources{state=drifted}": 1,
	})

	// A restarted service knows b drifted from the projection: its repair
	// is corrective. The counters start again at 0.
	h.open()
	want(t, "restarted", h.gather(), map[string]float64{intended: 0, corrective: 0, "mesh_host_resources{state=drifted}": 1})
	h.reconcile(agent.Request{Trigger: event.TriggerStart, Specs: []drivers.Spec{a, b2}, Repair: true})
	want(t, "repaired after a restart", h.gather(), map[string]float64{
		intended: 0, corrective: 1,
		"mesh_host_reconciles_total{result=converged,trigger=start}": 1,
		"mesh_host_resources{state=drifted}":                         0,
	})

	// Undeclared: deleted, intended.
	h.declare(a)
	want(t, "b undeclared", h.gather(), map[string]float64{intended: 1, corrective: 1, "mesh_host_resources{state=owned}": 1})
}

// TestFailingAndReleased: a resource whose apply fails is failing; a
// directory left in place is released, and no change.
func TestFailingAndReleased(t *testing.T) {
	h := newHost(t)
	d := &drivers.DirectorySpec{Path: "/etc/app"}
	h.declare(d, fileSpec("/etc/a.conf", "a\n"), fileSpec("/nowhere/b.conf", "b\n"))
	got := h.gather()
	want(t, "a file with no parent", got, map[string]float64{
		"mesh_host_resources{state=failing}":                     1,
		"mesh_host_resources{state=owned}":                       2,
		"mesh_host_reconciles_total{result=failed,trigger=push}": 1,
		"mesh_host_declaration_revision{which=desired}":          1,
		"mesh_host_declaration_revision{which=applied}":          1,
		"mesh_host_declaration_revision{which=last_good}":        0,
		"mesh_host_changes_total{cause=intended,kind=directory}": 1,
		intended: 1,
	})
	if got["mesh_host_last_reconcile_timestamp_seconds{result=failed}"] == 0 {
		t.Error("no time for the failed reconcile")
	}

	// Something else's file in the directory: undeclared, it is left in
	// place.
	if err := os.WriteFile(filepath.Join(h.root, "etc/app/theirs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	h.declare(fileSpec("/etc/a.conf", "a\n"))
	want(t, "directory released", h.gather(), map[string]float64{
		"mesh_host_resources{state=released}":                    1,
		"mesh_host_resources{state=failing}":                     0,
		"mesh_host_resources{state=owned}":                       1,
		"mesh_host_changes_total{cause=intended,kind=directory}": 1,
		"mesh_host_declaration_revision{which=last_good}":        2,
	})
}

// TestCardinality: a thousand files changed make series by kind, not by
// file; no label anywhere carries a path.
func TestCardinality(t *testing.T) {
	h := newHost(t)
	specs := []drivers.Spec{&drivers.DirectorySpec{Path: "/etc/many"}}
	for i := range 1000 {
		specs = append(specs, fileSpec(fmt.Sprintf("/etc/many/f%04d.conf", i), "x\n"))
	}
	h.declare(specs...)
	got := h.gather()
	want(t, "a thousand files", got, map[string]float64{intended: 1000, "mesh_host_resources{state=owned}": 1001})
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "mesh_host_changes_total{") {
			n++
		}
		if strings.Contains(k, "/") || strings.Contains(k, "f0") {
			t.Errorf("series %s names a resource", k)
		}
	}
	// Two causes for each of the drivers' eight kinds.
	if n != 16 {
		t.Errorf("got %d series of mesh_host_changes_total, want 16", n)
	}
}

func TestLabels(t *testing.T) {
	for id, kind := range map[string]string{
		"file:/etc/motd": "file", "unit:nginx.service": "unit", "package:curl": "package",
		"bogus:/etc/x": "other", "no-kind": "other", "file:": "other", "": "other",
	} {
		if got := hostmetrics.KindOf(id); got != kind {
			t.Errorf("KindOf(%q): got %q, want %q", id, got, kind)
		}
	}
	for tr, label := range map[event.Trigger]string{
		event.TriggerPushed: "push", event.TriggerStart: "start", event.TriggerReconnect: "reconnect",
		event.TriggerTimer: "timer", event.TriggerManual: "manual", event.TriggerWatch: "watch", "someday": "other",
	} {
		if got := hostmetrics.TriggerLabel(tr); got != label {
			t.Errorf("TriggerLabel(%q): got %q, want %q", tr, got, label)
		}
	}
}

// TestServe: /metrics is the exposition, with HELP on every series;
// anything else is 404.
func TestServe(t *testing.T) {
	h := newHost(t)
	h.declare(fileSpec("/etc/a.conf", "a\n"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.m.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	mfs := promtest.Parse(t, []byte(body))
	for _, name := range []string{
		"mesh_host_reconcile_duration_seconds", "mesh_host_reconciles_total", "mesh_host_changes_total",
		"mesh_host_drift_found_total", "mesh_host_resources", "mesh_host_refresh_owed",
		"mesh_host_last_reconcile_timestamp_seconds", "mesh_host_declaration_revision",
		"mesh_host_journal_records", "mesh_host_journal_bytes", "mesh_host_link_up", "mesh_host_build_info",
	} {
		mf, ok := mfs[name]
		if !ok {
			t.Errorf("no %s in\n%s", name, body)
			continue
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
	}
	info, err := h.j.Info()
	if err != nil {
		t.Fatal(err)
	}
	if got := mfs["mesh_host_journal_records"].GetMetric()[0].GetGauge().GetValue(); got != float64(info.Head) {
		t.Errorf("journal records: got %v, want %d", got, info.Head)
	}
	if got := mfs["mesh_host_journal_bytes"].GetMetric()[0].GetGauge().GetValue(); got != float64(info.Size) {
		t.Errorf("journal bytes: got %v, want %d", got, info.Size)
	}
	for _, p := range []string{"/", "/metrics/", "/debug/pprof/", "/healthz"} {
		if code, _ := get(p); code != http.StatusNotFound {
			t.Errorf("GET %s: got %d, want 404", p, code)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return when its context ended")
	}
}
