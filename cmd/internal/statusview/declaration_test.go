package statusview

import (
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/projector"
)

// TestInForce: status says which declaration is in force and where it
// came from; what the state names is cut to a line.
func TestInForce(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		s    projector.State
		want string
	}{
		{"none", projector.State{}, ""},
		{"from the mesh", projector.State{Desired: &projector.Desired{Revision: 3, Source: "link:pushed", Operator: "alice@ops", Signature: "sig"}},
			"revision 3 from the mesh, declared by alice@ops (signed)"},
		{"a reclaim", projector.State{Desired: &projector.Desired{Revision: 1, Source: "link:reconnect", Operator: "alice@ops", Signature: "sig", Reclaim: true}},
			"revision 1 from the mesh, declared by alice@ops (signed as a reclaim)"},
		{"a file, not enrolled", projector.State{Desired: &projector.Desired{Revision: 2, Source: "file:/srv/x.yaml"}},
			"revision 2 from file:/srv/x.yaml, applied on the machine"},
		{"a local override", projector.State{Desired: &projector.Desired{Revision: 2, Source: "file:/srv/x.yaml"},
			Local: &projector.LocalOverride{Revision: 2, Source: "file:/srv/x.yaml", User: "bob", Seq: 7, At: at, MeshRevision: 1}},
			"revision 2, a LOCAL OVERRIDE from file:/srv/x.yaml by bob since 2026-12-05T10:00:00Z (#7); the mesh's revision 1 is set aside (reclaim: meshctl declare NODE FILE --reclaim)"},
		{"a local override over nothing", projector.State{Local: &projector.LocalOverride{Revision: 2, Source: "file:/x", Seq: 3, At: at}},
			"revision 2, a LOCAL OVERRIDE from file:/x since 2026-12-05T10:00:00Z (#3); the mesh had declared nothing (reclaim: meshctl declare NODE FILE --reclaim)"},
	} {
		got, ok := inForce(tc.s)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("%s: got %q, %v, want %q", tc.name, got, ok, tc.want)
		}
	}
	long, _ := inForce(projector.State{Local: &projector.LocalOverride{Source: "file:/" + strings.Repeat("é", 1000), User: strings.Repeat("u", 1000)}})
	if len(long) > 3*maxShown {
		t.Errorf("a reported override of %d bytes is shown whole: %d bytes", 3000, len(long))
	}
}
