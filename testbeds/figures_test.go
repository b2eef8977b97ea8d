package testbeds_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/testbeds"
	"github.com/mesh-host/mesh-host/upgrade"
)

// The figures, as benchmarks over real processes. Run them with
//
//	go test ./testbeds -run '^$' -bench . -benchtime 200x
//
// (200 pushes per size; the idle and load figures ignore b.N and measure a
// fixed window). CPU and memory come from /proc, for the measured process
// only.

// BenchmarkPushToApplied: from storing a declaration (what meshctl declare
// does first) until the node's heartbeat says it is applied, over loopback,
// for a 1-file and a 100-file declaration whose every file changes.
func BenchmarkPushToApplied(b *testing.B) {
	for _, files := range []int{1, 100} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			h := bed.AddHost("web-1")
			h.Start()
			nc, kv := controlConn(b, bed)
			key, err := bed.DeclarationKey()
			if err != nil {
				b.Fatal(err)
			}
			beats := make(chan linkproto.Heartbeat, 64)
			sub, err := nc.Subscribe(linkproto.HeartbeatSubject(testbeds.Mesh, "web-1"), func(m *nats.Msg) {
				var hb linkproto.Heartbeat
				if linkproto.Decode(m.Data, linkproto.MaxReportSize, &hb) == nil {
					beats <- hb
				}
			})
			if err != nil {
				b.Fatal(err)
			}
			defer sub.Unsubscribe()

			// Revision 1 creates the directories; every measured push
			// rewrites every file.
			push(b, nc, kv, key, beats, 1, files)
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				lat = append(lat, push(b, nc, kv, key, beats, uint64(i+2), files))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// push declares revision rev of files files, signed with key as meshctl
// declare signs, and returns how long until the node reported it applied
// (the signing included).
func push(b *testing.B, nc *nats.Conn, kv jetstream.KeyValue, key nkeys.KeyPair, beats <-chan linkproto.Heartbeat, rev uint64, files int) time.Duration {
	b.Helper()
	type fileSpec struct {
		Path    string `json:"path"`
		Content string `json:"content"`
	}
	res := []map[string]any{{"directory": map[string]string{"path": "/etc/app"}}}
	for i := range files {
		res = append(res, map[string]any{"file": fileSpec{Path: fmt.Sprintf("/etc/app/f%03d.conf", i), Content: fmt.Sprintf("revision %d file %d\n", rev, i)}})
	}
	doc, _ := json.Marshal(map[string]any{"mesh": testbeds.Mesh, "node": "web-1", "revision": rev, "resources": res})
	d := linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: testbeds.Mesh, Node: "web-1", Revision: rev, Document: doc, Operator: "bench"}

	start := time.Now()
	if err := d.Sign(key); err != nil {
		b.Fatal(err)
	}
	msg := linkproto.Marshal(d)
	if _, err := kv.Put(context.Background(), linkproto.DesiredKey(testbeds.Mesh, "web-1"), msg); err != nil {
		b.Fatal(err)
	}
	reply, err := nc.Request(linkproto.DeclarationSubject(testbeds.Mesh, "web-1"), msg, 10*time.Second)
	if err != nil {
		b.Fatalf("push %d: %v", rev, err)
	}
	var ack linkproto.Ack
	if err := json.Unmarshal(reply.Data, &ack); err != nil || !ack.Accepted {
		b.Fatalf("push %d: ack %s", rev, reply.Data)
	}
	timeout := time.After(30 * time.Second)
	for {
		select {
		case hb := <-beats:
			if hb.Applied >= rev {
				if hb.Failed > 0 {
					b.Fatalf("revision %d: %d failed", rev, hb.Failed)
				}
				return time.Since(start)
			}
		case <-timeout:
			b.Fatalf("revision %d: no heartbeat says it is applied", rev)
		}
	}
}

// BenchmarkDeclareCommand: the real command line, `meshctl declare --wait
// 30s NODE FILE`, as an operator runs it, for a 1-file and a 100-file
// declaration whose every file changes: from the command's start until the
// node's heartbeat says the revision is applied (applied-ms), and until the
// command exits (command-ms), which it does once it has seen that
// heartbeat itself. Unlike BenchmarkPushToApplied, this counts meshctl's
// start, its reading and checking of the file and its connection.
func BenchmarkDeclareCommand(b *testing.B) {
	for _, files := range []int{1, 100} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			h := bed.AddHost("web-1")
			h.Start()
			nc, _ := controlConn(b, bed)
			applied := hearFirst(b, nc, testbeds.Mesh, func(hb *linkproto.Heartbeat, rev uint64) bool {
				return hb.Applied >= rev && hb.Failed == 0
			})
			var heard, wall []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				rev := uint64(i + 1)
				decl := bed.Declare("web-1", rev, revisionFiles(rev, files))
				applied.await(rev)
				b.StartTimer()
				start := time.Now()
				bed.MustMeshctl("declare", "--wait", "30s", "web-1", decl)
				wall = append(wall, time.Since(start))
				// The command returns after the node's heartbeat; this
				// listener may hear the same heartbeat a moment later.
				testbeds.Eventually(b, 10*time.Second, "the heartbeat saying it is applied", func() error {
					if len(applied.since(start)) == 0 {
						return fmt.Errorf("revision %d not heard applied", rev)
					}
					return nil
				})
				heard = append(heard, applied.since(start)[0])
			}
			b.ReportMetric(median(heard).Seconds()*1000, "applied-ms")
			b.ReportMetric(median(wall).Seconds()*1000, "command-ms")
		})
	}
}

// revisionFiles is n files under /etc/app whose contents change with rev.
func revisionFiles(rev uint64, n int) testbeds.Files {
	files := testbeds.Files{}
	for i := range n {
		files[fmt.Sprintf("/etc/app/f%03d.conf", i)] = fmt.Sprintf("revision %d file %d\n", rev, i)
	}
	return files
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func controlConn(b *testing.B, bed *testbeds.Bed) (*nats.Conn, jetstream.KeyValue) {
	b.Helper()
	nc, err := nats.Connect(bed.URL(), nats.UserCredentials(bed.CredsFile()), nats.RootCAs(bed.CAFile()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), linkproto.DesiredBucket)
	if err != nil {
		b.Fatal(err)
	}
	return nc, kv
}

// BenchmarkIdleHost: an enrolled host with a declaration of files applied,
// linked and doing nothing, over 60 s (MESH_IDLE_WINDOW): its CPU share and
// resident memory. The sizes are the declarations issue's: what the
// service holds after reconciling 1,000 and 19,000 files.
func BenchmarkIdleHost(b *testing.B) {
	for _, n := range []int{1, 1000, 19000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			bed := testbeds.New(b, bins)
			h := bed.AddHost("web-1")
			h.Start()
			files := testbeds.Files{"/etc/motd": "idle\n"}
			for i := range n - 1 {
				files[fmt.Sprintf("/etc/app/f%05d.conf", i)] = fmt.Sprintf("setting-%d = %d\n", i, i*7)
			}
			bed.MustMeshctl("declare", "--wait", "120s", "web-1", bed.Declare("web-1", 1, files))
			awaitSentUpward(b, h)
			// The service gives back what a reconcile or a command took at
			// once and again 5 s later, when what followed has settled.
			time.Sleep(6 * time.Second)
			b.ResetTimer()
			cpu, rss := measure(b, h.PID(), idleWindow())
			b.ReportMetric(cpu, "cpu-%")
			b.ReportMetric(rss, "rss-MB")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// awaitSentUpward waits until the host's events stream has acknowledged
// its whole journal: after a reconcile the host sends its records upward
// (19,000 of them for 19,000 files created), which is work, not idling.
func awaitSentUpward(b *testing.B, h *testbeds.Host) {
	b.Helper()
	testbeds.Eventually(b, 2*time.Minute, "the journal acknowledged upward", func() error {
		info, err := h.JournalInfo()
		if err != nil {
			return err
		}
		if info.Acked < info.Head {
			return fmt.Errorf("acknowledged through #%d of #%d", info.Acked, info.Head)
		}
		return nil
	})
}

func idleWindow() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MESH_IDLE_WINDOW")); err == nil {
		return d
	}
	return 60 * time.Second
}

// BenchmarkHeartbeats1000Nodes: 1,000 enrolled nodes, each on its own
// connection with its own credentials, send heartbeats once a second (60
// times the real rate) into one meshctl serve for 30 s: its CPU share and
// resident memory.
func BenchmarkHeartbeats1000Nodes(b *testing.B) {
	const nodes, every, window = 1000, time.Second, 30 * time.Second
	bed := testbeds.New(b, bins)
	dir := b.TempDir()
	conns := make([]*nats.Conn, nodes)
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	sem := make(chan struct{}, 16)
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("sim-%04d", i)
			r := bed.Meshctl("enrol", name)
			tok, err := linkproto.ParseToken(r.Stdout)
			if err != nil {
				errs <- fmt.Errorf("enrol %s: %v (%s)", name, err, r)
				return
			}
			// Redeemed as mesh-host enrol does: a key made here.
			key, err := nkeys.CreateUser()
			if err != nil {
				errs <- err
				return
			}
			seal, err := nkeys.CreateCurveKeys()
			if err != nil {
				errs <- err
				return
			}
			sealPub, _ := seal.PublicKey()
			file, _, err := link.Enrol(context.Background(), tok, key, sealPub)
			if err != nil {
				errs <- fmt.Errorf("redeem %s's token: %v", name, err)
				return
			}
			creds := filepath.Join(dir, name+".creds")
			if err := os.WriteFile(creds, file, 0o600); err != nil {
				errs <- err
				return
			}
			nc, err := nats.Connect(bed.URL(), nats.UserCredentials(creds), nats.RootCAs(bed.CAFile()), nats.CustomInboxPrefix(linkproto.InboxPrefix(testbeds.Mesh, name)))
			if err != nil {
				errs <- fmt.Errorf("connect %s: %v", name, err)
				return
			}
			conns[i] = nc
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i, nc := range conns {
		name := fmt.Sprintf("sim-%04d", i)
		go func() {
			t := time.NewTicker(every)
			defer t.Stop()
			// Spread the nodes over the second, as real ones would be.
			time.Sleep(time.Duration(i) * every / nodes)
			for {
				hb := linkproto.Heartbeat{Protocol: linkproto.ProtocolVersion, Mesh: testbeds.Mesh, Node: name, Version: "sim", Sent: time.Now().UTC(), Interval: linkproto.Duration(every), Applied: 1, Desired: 1, Owned: 20}
				_ = nc.Publish(linkproto.HeartbeatSubject(testbeds.Mesh, name), linkproto.Marshal(hb))
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}()
	}
	time.Sleep(3 * time.Second) // every node has sent at least twice
	b.ResetTimer()
	cpu, rss := measure(b, bed.Control.PID(), window)
	b.ReportMetric(cpu, "cpu-%")
	b.ReportMetric(rss, "rss-MB")
	b.ReportMetric(float64(nodes)/every.Seconds(), "heartbeats/s")
	b.ReportMetric(0, "ns/op")
	// Every simulated node is known, and none is silent.
	r := bed.Meshctl("nodes", "--json")
	seen, err := testbeds.JSONLines[struct {
		State string `json:"state"`
	}](r.Stdout)
	if err != nil || len(seen) != nodes {
		b.Fatalf("meshctl nodes --json: %d nodes (%v): %s", len(seen), err, r.Stderr)
	}
	for _, n := range seen {
		if n.State != "ok" {
			b.Fatalf("a node is %q after heartbeats every %s", n.State, every)
		}
	}
}

// BenchmarkHostBinary reports the size of the host binary as shipped
// (static, stripped).
func BenchmarkHostBinary(b *testing.B) {
	fi, err := os.Stat(bins.MeshHost)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(fi.Size())/1e6, "MB")
	b.ReportMetric(0, "ns/op")
}

// measure samples pid's CPU time and resident memory over window: the CPU
// share of one core, and the largest RSS seen, in MB.
func measure(b *testing.B, pid int, window time.Duration) (cpuPercent, rssMB float64) {
	b.Helper()
	t0, err := testbeds.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	var peak int64
	for time.Since(start) < window {
		if rss, err := testbeds.RSS(pid); err == nil && rss > peak {
			peak = rss
		}
		time.Sleep(time.Second)
	}
	t1, err := testbeds.CPUTime(pid)
	if err != nil {
		b.Fatal(err)
	}
	return 100 * (t1 - t0).Seconds() / time.Since(start).Seconds(), float64(peak) / 1e6
}

// BenchmarkReleaseTo10Nodes: one host release declared with meshctl
// release to 10 nodes, each running the first version under the real
// launcher: the time until meshctl nodes shows every node on the new
// version (fetched over HTTP from meshctl, unpacked, stood aside for,
// started, linked, reported).
func BenchmarkReleaseTo10Nodes(b *testing.B) {
	const n = 10
	builds := hostBuilds(b)
	bed := testbeds.New(b, bins)
	script := launcher(b, bed)
	var names []string
	for i := range n {
		name := fmt.Sprintf("node-%02d", i)
		h := bed.AddHost(name)
		if _, err := h.Install(bins.MeshHost); err != nil {
			b.Fatal(err)
		}
		h.StartLauncher(script, "MESH_HOST_RESTART_DELAY=0")
		names = append(names, name)
	}
	rel, err := testbeds.Pack(builds["v2"], b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	allOn := func(version string) error {
		vs, err := bed.NodeVersions()
		if err != nil {
			return err
		}
		on := 0
		for _, v := range vs {
			if v == version {
				on++
			}
		}
		if on < n {
			return fmt.Errorf("%d of %d nodes on %s", on, n, version)
		}
		return nil
	}
	for _, name := range names { // every node has a declaration to extend
		bed.MustMeshctl("declare", name, bed.Declare(name, 1, testbeds.Files{"/etc/motd": name + "\n"}), "--wait", "0")
	}
	b.ResetTimer()
	start := time.Now()
	bed.MustMeshctl("release", rel.Path, "--nodes", strings.Join(names, ","))
	testbeds.Eventually(b, 120*time.Second, "every node reports the release", func() error { return allOn(rel.Version()) })
	b.ReportMetric(time.Since(start).Seconds(), "s-to-all")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkRollback: a version that exits 1 at once is delivered to a host
// whose version is confirmed; the launcher tries it to the limit (3, with
// the launcher's delay between starts) and starts the known-good one. Measured from
// the old host standing aside (the bad version's first start follows at
// once) to the known-good version's host.started, both journal times.
func BenchmarkRollback(b *testing.B) {
	// The launcher waits MESH_HOST_RESTART_DELAY seconds between the
	// starts of a failing version: 2 by default, 0 for the bare cost.
	for _, delay := range []string{"0", "2"} {
		b.Run("restart-delay="+delay+"s", func(b *testing.B) { benchRollback(b, delay) })
	}
}

func benchRollback(b *testing.B, delay string) {
	bed := testbeds.New(b, bins)
	h := bed.AddHost("web-1")
	first, err := h.Install(bins.MeshHost)
	if err != nil {
		b.Fatal(err)
	}
	h.StartLauncher(launcher(b, bed), "MESH_HOST_RESTART_DELAY="+delay)
	bed.MustMeshctl("declare", "web-1", bed.Declare("web-1", 1, testbeds.Files{"/etc/motd": "hi\n"}))
	testbeds.Eventually(b, 30*time.Second, "the first version confirms", func() error {
		if v, _ := upgrade.ReadKnownGood(h.StateDir); v != first {
			return fmt.Errorf("known-good %q", v)
		}
		return nil
	})
	dir := b.TempDir()
	badBin := filepath.Join(dir, "bad")
	if err := os.WriteFile(badBin, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	bad, err := testbeds.Pack(badBin, h.Root)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	bed.MustMeshctl("declare", "web-1", bed.Declare("web-1", 2, nil, bad.ArchiveYAML()), "--wait", "0")
	var aside, back time.Time
	testbeds.Eventually(b, 60*time.Second, "the known-good version runs again", func() error {
		recs, err := h.TryRecords()
		if err != nil {
			return err
		}
		aside, back = time.Time{}, time.Time{}
		for _, r := range recs {
			switch {
			case r.Kind == event.VersionStoodAside && aside.IsZero():
				aside = r.Time
			case r.Kind == event.HostStarted && !aside.IsZero() && r.Time.After(aside):
				back = r.Time
			}
		}
		if back.IsZero() {
			return errors.New("not yet")
		}
		return nil
	})
	b.ReportMetric(back.Sub(aside).Seconds(), "s-to-rollback")
	// Disk used per kept version: the version directories as du counts
	// them, each a static host binary and its marker.
	du, err := exec.Command("du", "-sk", filepath.Join(h.Root, testbeds.VersionsDir, first)).Output()
	if err != nil {
		b.Fatal(err)
	}
	var kb float64
	fmt.Sscan(string(du), &kb)
	b.ReportMetric(kb/1024, "MiB-per-version")
	b.ReportMetric(0, "ns/op")
}
