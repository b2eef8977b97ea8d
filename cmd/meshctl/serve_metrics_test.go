package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/internal/basetest"
)

// serveMesh makes the fleet's metrics over its own connection, hands them
// to the HTTP side (Started), and tells them of the enrolments its node
// service answers.
func TestServeMakesTheFleetsMetrics(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	a, _, err := authority.Init(data, "lab")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	parts := make(chan serveParts, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- serveMesh(ctx, a, serveConfig{Listen: "127.0.0.1:0", ReleasesListen: "off", Now: time.Now,
			Log: slog.New(slog.NewTextHandler(log, nil)), Started: func(p serveParts) { parts <- p }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	var p serveParts
	select {
	case p = <-parts:
	case err := <-done:
		t.Fatalf("serve ended: %v\n%s", err, log)
	}
	if p.Metrics == nil {
		t.Fatal("serve handed no metrics")
	}
	basetest.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(log.String(), "answering hellos") {
			return fmt.Errorf("serve is not answering hellos:\n%s", log)
		}
		return nil
	})
	enrolled(t, data, "web-1")
	mfs, err := p.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "mesh_enrolments_total" && l.GetValue() == "accepted" {
					got["enrolled"] = fmt.Sprint(m.GetCounter().GetValue())
				}
				if mf.GetName() == "mesh_node_credentials" && l.GetValue() == "active" {
					got["credentials"] = fmt.Sprint(m.GetGauge().GetValue())
				}
			}
		}
	}
	if got["enrolled"] != "1" || got["credentials"] != "1" {
		t.Errorf("after one enrolment through serve: accepted enrolments %s, active credentials %s; want 1 and 1", got["enrolled"], got["credentials"])
	}
}
