package service

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/hostjournal"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
	"github.com/mesh-host/mesh-host/projector"
)

// reclaimPush is revision rev signed by the test mesh as a reclaim.
func reclaimPush(t *testing.T, rev uint64, motd string) *linkproto.Declaration {
	t.Helper()
	d := linkprototest.Push(rev, linkprototest.Doc(rev, motd))
	d.Reclaim = true
	key, err := nkeys.FromSeed([]byte(linkprototest.SigningKeySeed))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sign(key); err != nil {
		t.Fatal(err)
	}
	if err := d.Verify(linkprototest.SigningKeyPub); err != nil {
		t.Fatal(err)
	}
	return d
}

// applyLocal journals revision rev as `apply --local` does, over what the
// mesh declared.
func applyLocal(t *testing.T, j *journal.Journal, rev uint64, mesh *linkproto.Declaration) {
	t.Helper()
	decl, err := declaration.ParseJSON("local", []byte(linkprototest.Doc(rev, "by hand\n")))
	if err != nil {
		t.Fatal(err)
	}
	as := hostjournal.As{Local: true, User: "alice", Received: true}
	if mesh != nil {
		as.MeshRevision, as.MeshSignature = mesh.Revision, mesh.Signature
	}
	if _, _, err := hostjournal.AppendDeclarationAs(j, decl, hostjournal.Declared(decl.Expanded()), "file:/srv/x.yaml", nil, as); err != nil {
		t.Fatal(err)
	}
}

func stored(t *testing.T, j *journal.Journal) projector.State {
	t.Helper()
	s, _, err := hostjournal.StoredState(j)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAcceptOverLocal: under a local override the host refuses the mesh's
// declarations, naming the override; a reclaim takes it back whatever the
// local revision, ordered against the mesh's own revision alone; the
// reclaim the override set aside (a stored reclaim answering a later
// hello) does not.
func TestAcceptOverLocal(t *testing.T) {
	ctx := context.Background()
	h, j := newTestLinkHost(t)
	mesh1 := linkprototest.Push(1, linkprototest.Doc(1, "mesh\n"))
	if ack := h.Accept(ctx, mesh1, event.TriggerPushed); !ack.Accepted {
		t.Fatal(ack.Reason)
	}
	applyLocal(t, j, 2, mesh1)
	if l := stored(t, j).Local; l == nil || l.Revision != 2 || l.MeshRevision != 1 || l.User != "alice" {
		t.Fatalf("local override %+v, want revision 2 by alice over the mesh's 1", l)
	}

	for _, tc := range []struct {
		name string
		push *linkproto.Declaration
		want string
	}{
		{"the mesh's revision said again (a hello's answer)", mesh1, "the node is under a LOCAL OVERRIDE: revision 2 from file:/srv/x.yaml by alice since "},
		{"a newer push", linkprototest.Push(3, linkprototest.Doc(3, "mesh\n")), "`meshctl declare web-1 FILE --reclaim` takes it back"},
	} {
		ack := h.Accept(ctx, tc.push, event.TriggerReconnect)
		if ack.Accepted || !strings.Contains(ack.Reason, tc.want) {
			t.Errorf("%s: got %+v, want refused with %q", tc.name, ack, tc.want)
		}
		r := lastRecord(t, j)
		if r.Kind != event.DeclarationRefused {
			t.Errorf("%s: last record %s, want declaration.refused", tc.name, r.Kind)
		}
		if stored(t, j).Desired.Revision != 2 {
			t.Fatalf("%s: the local revision is no longer desired", tc.name)
		}
	}

	// The lockout: the mesh's revision 1 again, as a reclaim, under local 2.
	ack := h.Accept(ctx, reclaimPush(t, 1, "mesh\n"), event.TriggerPushed)
	if !ack.Accepted {
		t.Fatalf("reclaim: %+v", ack)
	}
	r := lastRecord(t, j)
	var p event.DeclarationReceivedPayload
	if err := json.Unmarshal(r.Payload, &p); err != nil || r.Kind != event.DeclarationReceived || !p.Reclaim || p.ReclaimedRevision != 2 || p.Revision != 1 {
		t.Fatalf("reclaim journaled as %s %+v", r.Kind, p)
	}
	s := stored(t, j)
	if s.Local != nil || s.Desired.Revision != 1 || !s.Desired.Reclaim {
		t.Fatalf("after the reclaim: local %+v, desired %+v", s.Local, s.Desired)
	}
	select {
	case <-h.wake:
	default:
		t.Fatal("a reclaim accepted did not wake the reconcile")
	}
	// Said again with no override in force: a declaration like any.
	if ack := h.Accept(ctx, reclaimPush(t, 1, "mesh\n"), event.TriggerReconnect); !ack.Accepted || ack.Seq != r.Seq {
		t.Fatalf("the reclaim said again: %+v", ack)
	}

	// A new override over the reclaim: the stored reclaim, answering the
	// next hello, is the one it set aside, and takes nothing back.
	applyLocal(t, j, 2, reclaimPush(t, 1, "mesh\n"))
	ack = h.Accept(ctx, reclaimPush(t, 1, "mesh\n"), event.TriggerReconnect)
	if ack.Accepted || !strings.Contains(ack.Reason, "this reclaim (revision 1) was taken before the override began") {
		t.Fatalf("the reclaim set aside: %+v", ack)
	}
	// A reclaim older than the mesh's revision set aside is refused.
	mesh3 := reclaimPush(t, 3, "mesh\n")
	if ack := h.Accept(ctx, mesh3, event.TriggerPushed); !ack.Accepted {
		t.Fatalf("a new reclaim: %+v", ack)
	}
	applyLocal(t, j, 9, mesh3)
	if ack := h.Accept(ctx, reclaimPush(t, 2, "mesh\n"), event.TriggerPushed); ack.Accepted || !strings.Contains(ack.Reason, "older than the mesh's revision 3") {
		t.Fatalf("an older reclaim: %+v", ack)
	}
}
