package testbeds_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/agent"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/service"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/directory"
	"github.com/mesh-host/mesh-host/drivers/file"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
	"github.com/mesh-host/mesh-host/testbeds"
)

// BenchmarkPlan1000Nodes: `meshctl plan` (the built binary, as an operator
// runs it) across 1,000 enrolled nodes, each holding a stored declaration
// of ten files: the wall time from the command's start to its grouped
// output, every node answering. Run it with
//
//	go test ./testbeds -run '^$' -bench Plan1000Nodes -benchtime 5x
//
// One machine does not run 1,000 host processes, so the nodes are 1,000
// host services (service.Run) in the benchmark's process, each enrolled by
// the real `mesh-host enrol` with its own key, credentials, journal, root
// and TLS connection to the real `meshctl serve`. Each plans with the
// reconciler's dry run over the file and directory drivers, against its
// own root; package main's wiring (admission, secrets, every driver kind)
// is what TestPlanAcrossNodes covers with real processes. MESH_PLAN_NODES
// sets another count.
func BenchmarkPlan1000Nodes(b *testing.B) {
	nodes := 1000
	if n, err := strconv.Atoi(os.Getenv("MESH_PLAN_NODES")); err == nil && n > 0 {
		nodes = n
	}
	bed := testbeds.New(b, bins)
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("sim-%04d", i)
	}
	start := time.Now()
	parallel(b, names, 16, func(name string) error { return enrolState(bed, name) })
	b.Logf("%d nodes enrolled in %s", nodes, time.Since(start).Round(time.Second))

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for _, name := range names {
		wg.Go(func() {
			if err := service.Run(ctx, simService(bed, name)); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		})
	}
	b.Cleanup(func() {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Error(err)
		}
	})

	// Each node's declaration stored (and pushed: each node journals it)
	// as meshctl declare stores it, once every node has reported.
	cl := benchClient(b, bed)
	testbeds.Eventually(b, 5*time.Minute, "every node reports", func() error {
		all, err := cl.Nodes(context.Background())
		if err != nil {
			return err
		}
		heard := 0
		for _, n := range all {
			if n.Heartbeat != nil {
				heard++
			}
		}
		if heard < nodes {
			return fmt.Errorf("%d of %d nodes heard", heard, nodes)
		}
		return nil
	})
	b.Logf("%d nodes linked in %s", nodes, time.Since(start).Round(time.Second))
	files := testbeds.Files{}
	for i := range 10 {
		files[fmt.Sprintf("/etc/app/f%02d.conf", i)] = fmt.Sprintf("file %d\n", i)
	}
	start = time.Now()
	parallel(b, names, 32, func(name string) error {
		d, err := declaration.ParseYAML(name, []byte(testbeds.DeclarationYAML(testbeds.Mesh, name, 1, files)))
		if err != nil {
			return err
		}
		var out strings.Builder
		if err := cl.Declare(context.Background(), &out, name, d, client.DeclareOptions{PushTimeout: 30 * time.Second}); err != nil {
			return err
		}
		if !strings.Contains(out.String(), "accepted") {
			return fmt.Errorf("declare %s: %s", name, out.String())
		}
		return nil
	})
	b.Logf("%d nodes declared in %s", nodes, time.Since(start).Round(time.Second))

	want := fmt.Sprintf("%d nodes: %d planned (1 plan)\n", nodes, nodes)
	for b.Loop() {
		r := bed.Meshctl("plan", "--deadline", "60s")
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			b.Fatalf("meshctl plan: want %q in\n%s", want, r)
		}
	}
	b.ReportMetric(float64(nodes), "nodes")

	// Where the time goes: listing the nodes to select from (what meshctl
	// nodes does), and the fan-out alone (Client.Plan, in this process).
	b.StopTimer()
	start = time.Now()
	if r := bed.Meshctl("nodes"); r.Code != 0 {
		b.Fatalf("meshctl nodes: %s", r)
	}
	b.ReportMetric(time.Since(start).Seconds(), "nodes-cmd-s")
	start = time.Now()
	results := cl.Plan(context.Background(), names, cl.NextStored, client.PlanOptions{Deadline: time.Minute})
	b.ReportMetric(time.Since(start).Seconds(), "fan-out-s")
	for _, r := range results {
		if r.Status != client.PlanPlanned {
			b.Fatalf("%s: %s: %s", r.Node, r.Status, r.Reason)
		}
	}
}

// enrolState enrols node as AddHost does (meshctl enrol, then mesh-host
// enrol with the token), into a state directory beside its own root.
func enrolState(bed *testbeds.Bed, node string) error {
	if err := os.MkdirAll(filepath.Join(bed.Dir, node, "root", "etc"), 0o755); err != nil {
		return err
	}
	r := bed.Meshctl("enrol", node)
	if r.Code != 0 {
		return fmt.Errorf("meshctl enrol %s: %s", node, r)
	}
	cmd := exec.Command(bins.MeshHost, "--state-dir", filepath.Join(bed.Dir, node, "state"), "enrol", "-")
	cmd.Stdin = strings.NewReader(strings.TrimSpace(r.Stdout) + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mesh-host enrol %s: %v\n%s", node, err, out)
	}
	return nil
}

// simService is the host service of node, run in this process: it
// reconciles nothing (its root stays empty) and plans with the
// reconciler's dry run.
func simService(bed *testbeds.Bed, node string) service.Config {
	root := filepath.Join(bed.Dir, node, "root")
	state := filepath.Join(bed.Dir, node, "state")
	return service.Config{
		Build: "bench", Root: root, Versions: "/var/lib/mesh-host/versions",
		StateDir: state, JournalPath: filepath.Join(state, "journal.db"), SocketPath: filepath.Join(state, "control.sock"),
		DriftInterval: time.Hour, CompactEvery: time.Hour, Retention: time.Hour, KeepLast: 1000,
		StopTimeout: time.Second, HeartbeatInterval: time.Minute, ScrubInterval: time.Hour,
		Log: slog.New(slog.DiscardHandler),
		Reconcile: func(context.Context, *journal.Journal, event.Trigger) (*agent.Result, error) {
			return &agent.Result{}, nil
		},
		Admit: func(*declaration.Declaration, projector.State) error { return nil },
		Plan: func(ctx context.Context, j *journal.Journal, d *declaration.Declaration) (*service.Planned, error) {
			s, _, err := hostjournal.StoredState(j)
			if err != nil {
				return nil, err
			}
			r, err := rootfs.Open(root)
			if err != nil {
				return nil, err
			}
			rc := &agent.Reconciler{Root: r, Now: time.Now, Drivers: map[drivers.Kind]drivers.Driver{
				drivers.KindFile: file.New(r), drivers.KindDirectory: directory.New(r),
			}}
			res, err := rc.Reconcile(ctx, agent.Request{Trigger: event.TriggerManual, Revision: d.Revision, Specs: d.Expanded(), Owned: agent.OwnedMap(s.Owned), DryRun: true})
			return &service.Planned{Result: res}, err
		},
	}
}

// benchClient is a control client as meshctl makes one.
func benchClient(b *testing.B, bed *testbeds.Bed) *client.Client {
	b.Helper()
	a, err := authority.Open(bed.Control.DataDir)
	if err != nil {
		b.Fatal(err)
	}
	nc, err := client.Dial(a, []string{bed.URL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	cl, err := client.NewClient(nc, a.Mesh)
	if err != nil {
		b.Fatal(err)
	}
	cl.Key, cl.Operator = a.DeclarationKey(), "bench"
	return cl
}

// parallel runs fn for every name, n at a time, failing b on the first
// error.
func parallel(b *testing.B, names []string, n int, fn func(string) error) {
	b.Helper()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for _, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(name); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}
