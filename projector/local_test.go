package projector

import (
	"testing"

	"github.com/mesh-host/mesh-host/journal/event"
)

// A local declaration begins an override, a later local one continues it
// with the mesh's revision it set aside, and the mesh's next declaration
// ends it; the stored fold and LoadLocal agree with the replay.
func TestLocalOverride(t *testing.T) {
	recs := numbered(
		rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 1, Digest: "d1", Source: "link:pushed", Signature: "sig1"}),
		rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 2, Digest: "d2", Source: "file:/srv/x.yaml",
			Local: true, User: "alice", MeshRevision: 1, MeshSignature: "sig1"}),
		rec(event.DeclarationReceived, "", event.DeclarationReceivedPayload{Revision: 1, Digest: "d1", Source: "link:pushed", Signature: "sig3", Reclaim: true, ReclaimedRevision: 2}),
	)
	want := &LocalOverride{Revision: 2, Source: "file:/srv/x.yaml", User: "alice", Seq: 2, At: at(2), MeshRevision: 1, MeshSignature: "sig1"}

	for n, wantLocal := range []*LocalOverride{nil, want, nil} {
		s := Replay(State{}, recs[:n+1])
		if d := Diff(State{Local: wantLocal}, State{Local: s.Local}); len(d) > 0 {
			t.Errorf("after %d records: got local %+v, want %+v", n+1, s.Local, wantLocal)
		}
		st := memStore{}
		if err := new(Stored).Fold(st, recs[:n+1]); err != nil {
			t.Fatal(err)
		}
		loaded, err := Load(st)
		if err != nil {
			t.Fatal(err)
		}
		if !Equal(loaded, s) {
			t.Errorf("after %d records: stored differs from replay: %v", n+1, Diff(s, loaded))
		}
		l, err := LoadLocal(st)
		if err != nil {
			t.Fatal(err)
		}
		if d := Diff(State{Local: wantLocal}, State{Local: l}); len(d) > 0 {
			t.Errorf("after %d records: LoadLocal got %+v, want %+v", n+1, l, wantLocal)
		}
	}
}
