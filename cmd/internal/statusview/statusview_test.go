package statusview

import (
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/projector"
)

// The machine line names the boot whole: it is what `journalctl -b` and
// `hostnamectl` take and show, and a prefix cut for digests ended mid-group.
func TestMachineLineNamesTheWholeBoot(t *testing.T) {
	const boot = "df0c2579-a8d7-4955-a68e-24375e472067"
	var out strings.Builder
	s := projector.State{Facts: &event.HostFactsPayload{Hostname: "web-1", Arch: "amd64", Kernel: "6.1.0", Cores: 2, MemoryMB: 1024, BootID: boot}}
	if err := Print(&out, s, Options{}); err != nil {
		t.Fatal(err)
	}
	want := "web-1: OS unknown (no os-release under the root), amd64, kernel 6.1.0, 2 cores, 1024 MiB, boot " + boot + ", addresses none"
	if !strings.Contains(out.String(), want) {
		t.Errorf("status:\n%s\nwant a machine line with %q", out.String(), want)
	}
}

// A refresh's failure is shown whole: its first line on the refresh's
// line, the rest (a failed unit's journal lines) indented under it.
func TestRefreshFailureIsNotCut(t *testing.T) {
	var out strings.Builder
	s := projector.State{Refreshes: map[string]projector.OwedRefresh{"unit:app.service": {
		Refresh: "restart", Seq: 4, FailedSeq: 9,
		Sources: []projector.RefreshSource{{Resource: "file:/etc/app.conf"}},
		Error:   "restart app.service: job failed\napp[12]: cannot bind :80: address in use\napp[12]: exiting",
	}}}
	if err := Print(&out, s, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"; last try failed (#9): restart app.service: job failed\n",
		"\n                  app[12]: cannot bind :80: address in use\n                  app[12]: exiting\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status:\n%s\nwant %q", out.String(), want)
		}
	}
}
