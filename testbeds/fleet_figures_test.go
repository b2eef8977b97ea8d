package testbeds_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/testbeds"
)

// The fleet figures of issue 12, over a real meshctl serve. Run them with
//
//	go test ./testbeds -run '^$' -bench Fleet -benchtime 1x
//
// (each measures one fleet; b.N is ignored).

// BenchmarkEnrolBatch: `meshctl enrol --batch` for 5,000 nodes, with and
// without a label a line (labels are stored through the running control
// service): the nodes enrolled a second.
func BenchmarkEnrolBatch(b *testing.B) {
	const nodes = 5000
	for _, labelled := range []bool{false, true} {
		b.Run(fmt.Sprintf("labels=%v", labelled), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			file := filepath.Join(b.TempDir(), "batch.txt")
			var lines strings.Builder
			for i := range nodes {
				fmt.Fprintf(&lines, "node-%05d", i)
				if labelled {
					fmt.Fprintf(&lines, " role=fleet rack=r%d", i%40)
				}
				lines.WriteByte('\n')
			}
			if err := os.WriteFile(file, []byte(lines.String()), 0o600); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			out := bed.MustMeshctl("enrol", "--batch", file)
			took := time.Since(start)
			b.StopTimer()
			if got := strings.Count(out, "\n"); got != nodes {
				b.Fatalf("enrol --batch printed %d lines, want %d", got, nodes)
			}
			b.ReportMetric(took.Seconds(), "s/batch")
			b.ReportMetric(nodes/took.Seconds(), "nodes/s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// fleetSizes are the fleets a benchmark runs: MESH_FLEET_NODES, as
// "100,1000,10000", or def.
func fleetSizes(b *testing.B, def ...int) []int {
	s := os.Getenv("MESH_FLEET_NODES")
	if s == "" {
		return def
	}
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("MESH_FLEET_NODES=%q: want sizes like 100,1000", s)
		}
		out = append(out, n)
	}
	return out
}

// envInt is the integer in env, or def.
func envInt(env string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
		return n
	}
	return def
}

// startFleet starts n real hosts at the default heartbeat interval, at
// most MESH_FLEET_PER_PROCESS (default 4,000) to a runner process, and
// waits until every one is reported ok. It returns the fleet and how long
// that took from the first start.
func startFleet(b *testing.B, bed *testbeds.Bed, n int) (*testbeds.Fleet, time.Duration) {
	b.Helper()
	// meshctl serve holds a descriptor a host, and the runners inherit
	// the limit and raise it for their own hosts (hostsPerRunner).
	raiseNoFile(b, uint64(4*n+4096))
	start := time.Now()
	// MESH_FLEET_HOSTS_DIR puts the hosts on a disk of their own (tmpfs
	// here, say), as each host of a fleet has, rather than on the control
	// service's.
	f := bed.StartFleet(runner(b), n, testbeds.FleetOptions{PerProcess: envInt("MESH_FLEET_PER_PROCESS", hostsPerRunner()), Dir: os.Getenv("MESH_FLEET_HOSTS_DIR")})
	waitSummary(b, bed, time.Duration(n)*50*time.Millisecond+2*time.Minute, fmt.Sprintf("%d nodes: %d ok; versions: %d bed", n, n, n))
	return f, time.Since(start)
}

// hostsPerRunner is how many hosts one runner process may hold within the
// hard RLIMIT_NOFILE, at testbeds.FleetNoFilePerHost descriptors a host
// (at most 4,000). The hosts share the process's descriptor table, as hosts
// on machines of their own never do: a rollout to 4,000 of them in one
// process at 5 descriptors a host ran out, and files failed to apply with
// "too many open files".
func hostsPerRunner() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max > 1<<30 {
		return 4000
	}
	return max(1, min(4000, int(lim.Max-testbeds.FleetNoFileMargin)/testbeds.FleetNoFilePerHost))
}

func raiseNoFile(b *testing.B, want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatal(err)
	}
	if lim.Cur >= want {
		return
	}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: want, Max: max(lim.Max, want)}) == nil {
		return
	}
	// Above the hard limit needs CAP_SYS_RESOURCE: as far as it goes.
	lim.Cur = min(want, lim.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		b.Fatalf("raise RLIMIT_NOFILE to %d: %v", lim.Cur, err)
	}
	if lim.Cur < want {
		b.Logf("RLIMIT_NOFILE %d, the hard limit, not %d", lim.Cur, want)
	}
}

// usage is processes' CPU share over a window, and their peak and mean
// resident memory in it.
type usage struct {
	cpuPercent float64
	peakRSS    int64
	meanRSS    int64
}

// measurePIDs samples every pid's CPU time and resident memory over
// window: the CPU share of one core each, and the largest and the mean RSS
// seen each (sampled every second).
func measurePIDs(b *testing.B, window time.Duration, pids ...int) []usage {
	b.Helper()
	t0 := make([]time.Duration, len(pids))
	for i, pid := range pids {
		var err error
		if t0[i], err = testbeds.CPUTime(pid); err != nil {
			b.Fatal(err)
		}
	}
	out := make([]usage, len(pids))
	sum := make([]int64, len(pids))
	samples := make([]int64, len(pids))
	start := time.Now()
	for time.Since(start) < window {
		for i, pid := range pids {
			rss, err := testbeds.RSS(pid)
			if err != nil {
				continue
			}
			out[i].peakRSS = max(out[i].peakRSS, rss)
			sum[i] += rss
			samples[i]++
		}
		time.Sleep(time.Second)
	}
	for i, pid := range pids {
		t1, err := testbeds.CPUTime(pid)
		if err != nil {
			b.Fatal(err)
		}
		out[i].cpuPercent = 100 * (t1 - t0[i]).Seconds() / time.Since(start).Seconds()
		if samples[i] > 0 {
			out[i].meanRSS = sum[i] / samples[i]
		}
	}
	return out
}

// timeMeshctl runs meshctl args three times and returns the median wall
// time of those that succeeded, process start to exit, as an operator
// sees it, and how many failed (logged): a figure, not a test, so a
// failure is counted rather than fatal unless all three fail.
func timeMeshctl(b *testing.B, bed *testbeds.Bed, args ...string) (time.Duration, int) {
	b.Helper()
	var took []time.Duration
	failed := 0
	for range 3 {
		start := time.Now()
		if r := bed.Meshctl(args...); r.Code != 0 {
			failed++
			b.Logf("meshctl %s: %s", strings.Join(args, " "), r)
			continue
		}
		took = append(took, time.Since(start))
	}
	if len(took) == 0 {
		b.Fatalf("meshctl %s failed three times", strings.Join(args, " "))
	}
	slices.Sort(took)
	return took[len(took)/2], failed
}

// BenchmarkFleet: N real hosts (MESH_FLEET_NODES, default 100 and 1,000),
// linked and heartbeating at the default interval into one meshctl serve
// with its embedded broker, measured over MESH_FLEET_WINDOW (default 65 s:
// every node beats at least once): meshctl serve's CPU share and RSS (and
// RSS per node, over its RSS before the fleet), the runners' RSS per host,
// and the wall time of `meshctl nodes --summary` and `nodes --json`.
func BenchmarkFleet(b *testing.B) {
	for _, n := range fleetSizes(b, 100, 1000) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			fleetFigures(b, testbeds.New(b, bins), n)
		})
	}
}

var natsServer = sync.OnceValues(func() (string, error) {
	return testbeds.BuildNATSServer(filepath.Dir(bins.MeshHost))
})

// BenchmarkFleetOnCluster is BenchmarkFleet (default 1,000 nodes) with
// meshctl serve on a cluster of three nats-server processes on this
// machine, configured from meshctl nats-config, instead of its embedded
// broker: the servers' CPU and RSS too.
func BenchmarkFleetOnCluster(b *testing.B) {
	server, err := natsServer()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range fleetSizes(b, 1000) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			fleetFigures(b, testbeds.NewOnCluster(b, bins, server, 3), n)
		})
	}
}

// fleetFigures starts n hosts on bed and reports BenchmarkFleet's figures,
// and the cluster's servers' if it has them.
func fleetFigures(b *testing.B, bed *testbeds.Bed, n int) {
	window := 65 * time.Second
	if d, err := time.ParseDuration(os.Getenv("MESH_FLEET_WINDOW")); err == nil {
		window = d
	}
	pids := []int{bed.Control.PID()}
	for _, s := range bed.Cluster {
		pids = append(pids, s.PID())
	}
	before := make([]int64, len(pids))
	for i, pid := range pids {
		var err error
		if before[i], err = testbeds.RSS(pid); err != nil {
			b.Fatal(err)
		}
	}
	f, up := startFleet(b, bed, n)
	b.ResetTimer()
	use := measurePIDs(b, window, append(pids, f.PIDs()...)...)
	summary, summaryFailed := timeMeshctl(b, bed, "nodes", "--summary")
	asJSON, jsonFailed := timeMeshctl(b, bed, "nodes", "--json")
	b.StopTimer()
	var runnerRSS int64
	var runnerCPU float64
	for _, u := range use[len(pids):] {
		runnerRSS += u.peakRSS
		runnerCPU += u.cpuPercent
	}
	b.ReportMetric(up.Seconds(), "s-to-all-ok")
	b.ReportMetric(use[0].cpuPercent, "serve-cpu-%")
	b.ReportMetric(float64(use[0].peakRSS)/1e6, "serve-rss-MB")
	b.ReportMetric(float64(use[0].peakRSS-before[0])/1e3/float64(n), "serve-KB/node")
	// Over the window: what the fleet holds on the whole, between the
	// peaks of its heartbeats (each grows its connection's stacks until
	// tuning.SettleStacks shrinks them).
	b.ReportMetric(float64(use[0].meanRSS-before[0])/1e3/float64(n), "serve-mean-KB/node")
	if len(bed.Cluster) > 0 {
		var cpu float64
		var rss, grown int64
		for i, u := range use[1:len(pids)] {
			cpu += u.cpuPercent
			rss += u.peakRSS
			grown += u.peakRSS - before[1+i]
		}
		b.ReportMetric(cpu, "servers-cpu-%")
		b.ReportMetric(float64(rss)/1e6, "servers-rss-MB")
		b.ReportMetric(float64(grown)/1e3/float64(n), "servers-KB/node")
	}
	b.ReportMetric(float64(runnerRSS)/1e3/float64(n), "runner-KB/host")
	b.ReportMetric(runnerCPU, "runner-cpu-%")
	b.ReportMetric(summary.Seconds(), "s-nodes-summary")
	b.ReportMetric(asJSON.Seconds(), "s-nodes-json")
	b.ReportMetric(float64(summaryFailed+jsonFailed), "nodes-failed")
	b.ReportMetric(0, "ns/op")
	// Still every node ok after the window: none fell silent.
	waitSummary(b, bed, 30*time.Second, fmt.Sprintf("%d nodes: %d ok; versions: %d bed", n, n, n))
}

// pushFunc declares revision rev of d for every node: how a fleet gets a
// declaration (today one declare per node, concurrently; a rollout
// later). It returns when every push is stored and sent.
type pushFunc func(ctx context.Context, nodes []string, rev uint64, doc func(node string) *declaration.Declaration) error

// declareEach is meshctl declare for every node, through client.Client
// as the command runs it, MESH_PUSH_PARALLEL (default 32) at a time.
func declareEach(cl *client.Client) pushFunc {
	return func(ctx context.Context, nodes []string, rev uint64, doc func(node string) *declaration.Declaration) error {
		errs := make(chan error, len(nodes))
		next := make(chan string)
		var wg sync.WaitGroup
		for range envInt("MESH_PUSH_PARALLEL", 32) {
			wg.Go(func() {
				for node := range next {
					if err := cl.Declare(ctx, io.Discard, node, doc(node), client.DeclareOptions{}); err != nil {
						errs <- fmt.Errorf("declare %s: %w", node, err)
					}
				}
			})
		}
		for _, node := range nodes {
			next <- node
		}
		close(next)
		wg.Wait()
		close(errs)
		return <-errs
	}
}

// BenchmarkDeclareToNodes: one small file declared to every node of a
// fleet of real hosts (MESH_FLEET_NODES, default 100 and 1,000): for each
// node, the time from the start of the push until its heartbeat says the
// revision is applied; p50 and max over the nodes.
func BenchmarkDeclareToNodes(b *testing.B) {
	for _, n := range fleetSizes(b, 100, 1000) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			f, _ := startFleet(b, bed, n)
			a, err := authority.Open(bed.Control.DataDir)
			if err != nil {
				b.Fatal(err)
			}
			nc, err := client.Dial(a, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			cl, err := client.NewClient(nc, a.Mesh)
			if err != nil {
				b.Fatal(err)
			}
			cl.Key, cl.Operator = a.DeclarationKey(), "bench"
			push := declareEach(cl)

			applied := hearFirst(b, nc, a.Mesh, func(hb *linkproto.Heartbeat, rev uint64) bool { return hb.Applied >= rev })

			var p50, worst, pushed []time.Duration
			b.ResetTimer()
			for i := range b.N {
				rev := uint64(i + 1)
				applied.await(rev)
				docs := map[string]*declaration.Declaration{}
				for _, node := range f.Nodes {
					d, err := declaration.ParseYAML(node, []byte(testbeds.DeclarationYAML(a.Mesh, node, rev, testbeds.Files{"/etc/fleet.conf": fmt.Sprintf("revision %d\n", rev)})))
					if err != nil {
						b.Fatal(err)
					}
					docs[node] = d
				}
				start := time.Now()
				if err := push(context.Background(), f.Nodes, rev, func(node string) *declaration.Declaration { return docs[node] }); err != nil {
					b.Fatal(err)
				}
				pushed = append(pushed, time.Since(start))
				testbeds.Eventually(b, time.Duration(n)*10*time.Millisecond+time.Minute, "every node reports it applied", func() error {
					if heard := len(applied.since(start)); heard < n {
						return fmt.Errorf("%d of %d", heard, n)
					}
					return nil
				})
				took := applied.since(start)
				p50, worst = append(p50, took[len(took)/2]), append(worst, took[len(took)-1])
			}
			b.StopTimer()
			slices.Sort(p50)
			slices.Sort(worst)
			b.ReportMetric(p50[len(p50)/2].Seconds(), "p50-s")
			b.ReportMetric(worst[len(worst)-1].Seconds(), "max-s")
			// Until every push is stored and acknowledged (journaled by
			// its node): the rest is the nodes' applying and reporting.
			slices.Sort(pushed)
			b.ReportMetric(pushed[len(pushed)/2].Seconds(), "pushed-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkRolloutToNodes: one profile changed, then `meshctl rollout`
// (the command, as an operator runs it: one rollout, one wave) to every
// node of a fleet of real hosts (MESH_FLEET_NODES, default 100 and
// 1,000). For each node, the time from the command's start until its
// heartbeat says it converged the new revision: p50 and max; and the
// command's own wall time, which ends when the control service has seen
// every node converge.
func BenchmarkRolloutToNodes(b *testing.B) {
	for _, n := range fleetSizes(b, 100, 1000) {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			startFleet(b, bed, n)
			a, err := authority.Open(bed.Control.DataDir)
			if err != nil {
				b.Fatal(err)
			}
			nc, err := client.Dial(a, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()

			converged := hearFirst(b, nc, a.Mesh, func(hb *linkproto.Heartbeat, rev uint64) bool { return hb.LastGood >= rev })
			profile := filepath.Join(b.TempDir(), "fleet.yaml")

			var p50, worst, wall []time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				src := fmt.Sprintf("resources:\n  - file: {path: /etc/fleet.conf, content: \"revision %d of ${node}\\n\"}\n", i+1)
				if err := os.WriteFile(profile, []byte(src), 0o644); err != nil {
					b.Fatal(err)
				}
				bed.MustMeshctl("profile", "set", "fleet", profile)
				converged.await(uint64(i + 1)) // every node starts with none: the rollout's is its revision i+1
				b.StartTimer()
				start := time.Now()
				res := bed.Meshctl("rollout", "--select", "", "--wait-healthy", "5m")
				if res.Code != 0 {
					b.Fatalf("meshctl rollout: exit %d\n%s%s", res.Code, lastLines(res.Stdout, 20), failedNodeJournal(bed, res.Stderr))
				}
				out := res.Stdout
				wall = append(wall, time.Since(start))
				if !strings.Contains(out, fmt.Sprintf("done: %d converged", n)) {
					b.Fatalf("rollout:\n%s", out)
				}
				took := converged.since(start)
				if len(took) < n {
					b.Fatalf("%d of %d nodes were heard converging", len(took), n)
				}
				p50, worst = append(p50, took[len(took)/2]), append(worst, took[len(took)-1])
			}
			b.StopTimer()
			slices.Sort(p50)
			slices.Sort(worst)
			slices.Sort(wall)
			b.ReportMetric(p50[len(p50)/2].Seconds(), "p50-s")
			b.ReportMetric(worst[len(worst)-1].Seconds(), "max-s")
			b.ReportMetric(wall[len(wall)/2].Seconds(), "command-s")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// lastLines is the last n lines of s: a rollout to thousands prints a line
// a node.
func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "")
}

// failedNodeJournal is the journal of the node a failed rollout names
// (its message: "... NODE failed in wave ..."), to say why it failed.
func failedNodeJournal(bed *testbeds.Bed, stderr string) string {
	before, _, ok := strings.Cut(stderr, " failed in wave ")
	if !ok {
		return stderr
	}
	node := before[strings.LastIndex(before, " ")+1:]
	j := bed.Meshctl("journal", "--json", node)
	return fmt.Sprintf("%s\nmeshctl journal %s:\n%s%s", stderr, node, lastLines(j.Stdout, 30), j.Stderr)
}

// firstHeard records when each node's heartbeat first met a condition on
// the revision awaited: applied, or converged.
type firstHeard struct {
	mu  sync.Mutex
	rev uint64
	at  map[string]time.Time
}

// hearFirst listens to every heartbeat of mesh until the benchmark ends.
func hearFirst(b *testing.B, nc *nats.Conn, mesh string, met func(hb *linkproto.Heartbeat, rev uint64) bool) *firstHeard {
	f := &firstHeard{at: map[string]time.Time{}}
	sub, err := nc.Subscribe(linkproto.AllHeartbeats(mesh), func(m *nats.Msg) {
		var hb linkproto.Heartbeat
		if linkproto.Decode(m.Data, linkproto.MaxReportSize, &hb) != nil {
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.at[hb.Node]; !ok && f.rev > 0 && met(&hb, f.rev) {
			f.at[hb.Node] = time.Now()
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sub.Unsubscribe() })
	return f
}

// await forgets what was heard and waits for revision rev.
func (f *firstHeard) await(rev uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rev = rev
	clear(f.at)
}

// since is how long after start each node heard from was heard, sorted.
func (f *firstHeard) since(start time.Time) []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]time.Duration, 0, len(f.at))
	for _, at := range f.at {
		out = append(out, at.Sub(start))
	}
	slices.Sort(out)
	return out
}
