package testbeds_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/testbeds"
)

// denied returns the reason of h's first link.denied record, or an error.
func denied(h *testbeds.Host) (string, error) {
	recs, err := h.TryRecords()
	if err != nil {
		return "", err
	}
	for _, r := range recs {
		if r.Kind == event.LinkDenied {
			var p event.LinkPayload
			if err := json.Unmarshal(r.Payload, &p); err != nil {
				return "", err
			}
			return p.Reason, nil
		}
	}
	return "", fmt.Errorf("%s has journaled no link.denied", h.Name)
}

func linkedUp(h *testbeds.Host) func() error {
	return func() error {
		recs, err := h.TryRecords()
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Kind == event.LinkUp {
				return nil
			}
		}
		return fmt.Errorf("%s's link is not up", h.Name)
	}
}

// TestEnrolAgainAndRevokeEndRunningHosts: real processes. Enrolling a
// second machine as web-1 revokes the first's key: the broker drops the
// running host within 5 s and it journals why. Then `meshctl revoke web-1`
// does the same to the second. Each host keeps running offline, holding
// its machine from its journal. The times are logged.
func TestEnrolAgainAndRevokeEndRunningHosts(t *testing.T) {
	b := beds(t)
	first := b.AddHost("web-1")
	first.Start()
	testbeds.Eventually(t, 10*time.Second, "the first machine links up", linkedUp(first))
	b.MustMeshctl("declare", "web-1", b.Declare("web-1", 1, testbeds.Files{"/etc/motd": "one\n"}))

	start := time.Now()
	second := b.AddMachine("web-1-new", "web-1")
	testbeds.Eventually(t, 5*time.Second, "the first machine is denied once the node is enrolled again", func() error {
		reason, err := denied(first)
		if err == nil && !strings.Contains(reason, "revoked") {
			return testbeds.Fatal(fmt.Errorf("link.denied %q, want the broker's revocation", reason))
		}
		return err
	})
	t.Logf("second enrolment → first machine's link.denied journaled in %v", time.Since(start).Round(time.Millisecond))
	if !first.Running() || readRoot(t, first, "etc/motd") != "one\n" {
		t.Error("the first machine stopped, or lost what it held")
	}
	if r := first.Run("status"); r.Code != 0 {
		t.Errorf("status of the denied host: %s", r)
	}

	second.Start()
	testbeds.Eventually(t, 10*time.Second, "the second machine links up", linkedUp(second))
	start = time.Now()
	out := b.MustMeshctl("revoke", "web-1")
	if !strings.HasPrefix(out, "revoked web-1 (key U") {
		t.Errorf("meshctl revoke printed %q", out)
	}
	testbeds.Eventually(t, 5*time.Second, "the second machine is denied after meshctl revoke", func() error {
		_, err := denied(second)
		return err
	})
	t.Logf("meshctl revoke → host's link.denied journaled in %v (revoke itself took part of it)", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(b.MustMeshctl("nodes"), "revoked") {
		t.Errorf("meshctl nodes after revoke:\n%s", b.MustMeshctl("nodes"))
	}
	if !second.Running() {
		t.Error("the revoked host stopped; it should run on, offline")
	}
}
