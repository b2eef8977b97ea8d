package testbeds_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/internal/promtest"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds"
)

// moved is what changed from a to b among the series named by prefix,
// by how much.
func moved(a, b map[string]float64, prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range b {
		if strings.HasPrefix(k, prefix) && v != a[k] {
			out[k] = v - a[k]
		}
	}
	return out
}

func sameMoves(t *testing.T, what string, got, want map[string]float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: the series moved %v, want %v", what, got, want)
		return
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: the series moved %v, want %v", what, got, want)
			return
		}
	}
}

// Both ends' series follow the host's journal: after a drift repaired,
// one corrective change; after a rollout that changed the file, one
// intended change; and the control plane's count of the rollout's push,
// its waves and the node's state.
func TestMetricsFollowTheJournal(t *testing.T) {
	bed := testbeds.NewWeb(t, bins)
	h := bed.AddHost("web-1")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	h.Start("--metrics-listen", addr)
	hostURL := "http://" + addr + "/metrics"
	bed.MustMeshctl("label", "web-1", "role=web")
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v1\\n\"}\n", "--select", "role=web")
	if out := bed.MustMeshctl("rollout", "--select", "role=web", "--wait-healthy", "30s"); !strings.Contains(out, "done: 1 converged") {
		t.Fatalf("first rollout:\n%s", out)
	}
	head := len(h.Records())
	before := promtest.Scrape(t, hostURL, "")

	// Drift, repaired.
	if err := os.WriteFile(filepath.Join(h.Root, "etc/motd"), []byte("edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := h.Run("check"); r.Code != 0 {
		t.Fatalf("check: %s", r)
	}
	repaired := promtest.Scrape(t, hostURL, "")
	recs := h.Records()[head:]
	if kinds := recordKinds(recs, "file:/etc/motd"); kinds != "drift.observed resource.applied:updated" {
		t.Fatalf("the journal of the repair: %q", kinds)
	}
	sameMoves(t, "a drift repaired", moved(before, repaired, "mesh_host_changes_total"), map[string]float64{`mesh_host_changes_total{cause=corrective,kind=file}`: 1})
	sameMoves(t, "a drift repaired", moved(before, repaired, "mesh_host_drift_found_total"), map[string]float64{`mesh_host_drift_found_total{kind=file}`: 1})
	sameMoves(t, "a drift repaired", moved(before, repaired, "mesh_host_reconciles_total"), map[string]float64{`mesh_host_reconciles_total{result=converged,trigger=manual}`: 1})

	// A rollout of a new content: one intended change, pushed.
	head = len(h.Records())
	writeProfile(t, bed, "motd", "resources:\n  - file: {path: /etc/motd, content: \"v2\\n\"}\n", "--select", "role=web")
	if out := bed.MustMeshctl("rollout", "--select", "role=web", "--wait-healthy", "30s"); !strings.Contains(out, "done: 1 converged") {
		t.Fatalf("second rollout:\n%s", out)
	}
	rolled := promtest.Scrape(t, hostURL, "")
	if kinds := recordKinds(h.Records()[head:], "file:/etc/motd"); kinds != "resource.applied:updated" {
		t.Fatalf("the journal of the rollout: %q", kinds)
	}
	sameMoves(t, "a rollout", moved(repaired, rolled, "mesh_host_changes_total"), map[string]float64{`mesh_host_changes_total{cause=intended,kind=file}`: 1})
	sameMoves(t, "a rollout", moved(repaired, rolled, "mesh_host_drift_found_total"), nil)
	sameMoves(t, "a rollout", moved(repaired, rolled, "mesh_host_reconciles_total"), map[string]float64{`mesh_host_reconciles_total{result=converged,trigger=push}`: 1})
	if rolled[`mesh_host_declaration_revision{which=applied}`] != rolled[`mesh_host_declaration_revision{which=desired}`] || rolled[`mesh_host_resources{state=owned}`] != 1 || rolled[`mesh_host_link_up{}`] != 1 {
		t.Errorf("the host's gauges after the rollout: %v", moved(nil, rolled, "mesh_host_"))
	}

	// The control plane saw both rollouts' pushes accepted, the node's
	// records of them, the last rollout's wave, and the node ok.
	// The nodes' records reach the events stream after their apply; the
	// fleet's snapshot is read again every few seconds.
	tok := bed.WebToken()
	var fleet map[string]float64
	testbeds.Eventually(t, 20*time.Second, "the control plane counts the rollouts", func() error {
		fleet = promtest.Scrape(t, bed.Control.WebURL()+"/metrics", tok)
		for k, want := range map[string]float64{
			`mesh_nodes{state=ok}`:                                    1,
			`mesh_rollout_pushes_total{outcome=accepted}`:             2,
			`mesh_node_declarations_total{outcome=received,via=push}`: 2,
		} {
			if fleet[k] != want {
				return fmt.Errorf("%s = %v, want %v (%v)", k, fleet[k], want, moved(nil, fleet, "mesh_"))
			}
		}
		return nil
	})
	converged := 0.0
	for k, v := range fleet {
		if strings.HasPrefix(k, "mesh_rollout_wave_nodes{") && strings.Contains(k, "step=converged") && strings.Contains(k, "wave=0") {
			converged += v
		}
	}
	if converged != 2 {
		t.Errorf("control plane: %v nodes converged in wave 0 over the two rollouts, want 2", converged)
	}
}

// recordKinds lists the records about resource, "kind" or
// "kind:action" for a resource.applied.
func recordKinds(recs []event.Record, resource string) string {
	var out []string
	for _, r := range recs {
		if r.Resource != resource {
			continue
		}
		k := string(r.Kind)
		if r.Kind == event.ResourceApplied {
			var p event.ResourceAppliedPayload
			_ = json.Unmarshal(r.Payload, &p)
			k += ":" + string(p.Action)
		}
		out = append(out, k)
	}
	return strings.Join(out, " ")
}
