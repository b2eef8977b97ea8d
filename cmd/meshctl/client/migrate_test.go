package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/cmd/meshctl/nodeservice"
	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
)

// An events stream made before the sequence went into the subject keeps
// every record when the service starts: each moves to its own subject
// before the stream takes its limit of one message per subject, which
// would otherwise keep only each node's last.
func TestEnsureMovesLegacyRecordsToTheirOwnSubjects(t *testing.T) {
	b := newBed(t)
	ctx := context.Background()
	// The stream as the previous meshctl made it.
	if err := b.js.DeleteStream(ctx, linkproto.EventsStream); err != nil {
		t.Fatal(err)
	}
	if _, err := b.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: linkproto.EventsStream, Subjects: []string{linkproto.LegacyAnyMeshEvents},
		Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute, NoAck: true,
	}); err != nil {
		t.Fatal(err)
	}
	legacy := func(node string, seq uint64, headerSeq string) {
		m := nats.NewMsg("mesh." + testMesh + ".up." + node + ".events")
		m.Header.Set("Nats-Msg-Id", fmt.Sprintf("%s.%s.%d", testMesh, node, seq))
		m.Header.Set("Mesh-Seq", headerSeq) // the header the old layout carried the sequence in
		m.Data = bRecord(t, seq, "legacy")
		if err := b.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for seq := uint64(1); seq <= 5; seq++ {
		legacy("a", seq, fmt.Sprint(seq))
		legacy("b", seq, fmt.Sprint(seq))
	}
	legacy("b", 6, "60") // its header and body disagree: not moved
	if err := b.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	basetest.Eventually(t, 5*time.Second, func() error {
		st, err := b.js.Stream(ctx, linkproto.EventsStream)
		if err != nil {
			return err
		}
		if info, err := st.Info(ctx); err != nil || info.State.Msgs != 11 {
			return fmt.Errorf("the legacy stream holds %v messages (%v)", info, err)
		}
		return nil
	})

	s := &nodeservice.Service{Conn: b.nc, Mesh: testMesh, Log: b.log}
	for range 2 {
		if err := s.Ensure(ctx); err != nil {
			t.Fatal(err)
		}
	}
	want := []uint64{1, 2, 3, 4, 5}
	for _, name := range []string{"a", "b"} {
		n := &node{name: name, js: b.js}
		if got := n.history(t); !slices.Equal(got, want) {
			t.Errorf("%s's history after the move: %v, want %v", name, got, want)
		}
	}
	st, err := b.js.Stream(ctx, linkproto.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if m, err := st.GetLastMsgForSubject(ctx, linkproto.LegacyAnyMeshEvents); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a legacy message is left: %v (err %v)", m, err)
	}
	if cfg := st.CachedInfo().Config; !slices.Equal(cfg.Subjects, []string{linkproto.AnyMeshEvents}) || cfg.MaxMsgsPerSubject != 1 || !cfg.DiscardNewPerSubject {
		t.Errorf("events stream after the move: %+v", cfg)
	}
}
