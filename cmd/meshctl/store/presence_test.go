package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/internal/basetest"
	"github.com/mesh-host/mesh-host/linkproto"
)

// Presence records keep the latest: the same event twice, an older one
// after a newer, and the close of a connection older than the one open
// are not stored; a bad record is refused before it is stored.
func TestPresenceRecord(t *testing.T) {
	s := basetest.NATS(t, &server.Options{JetStream: true, StoreDir: t.TempDir()})
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(t.Context(), js, "home", 0); err != nil {
		t.Fatal(err)
	}
	ps, err := New(js).Presences(t.Context(), "home")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 5, 1, 0, 0, 0, time.UTC)
	first := Presence{Node: "web-1", Connected: true, At: at, Since: at, Conn: "S/1"}
	closed := Presence{Node: "web-1", At: at.Add(time.Minute), Since: at, Conn: "S/1", Reason: "Client Closed"}
	second := Presence{Node: "web-1", Connected: true, At: at.Add(2 * time.Minute), Since: at.Add(2 * time.Minute), Conn: "S/2"}
	// The first connection found stale after the node came back on a
	// second.
	stale := Presence{Node: "web-1", At: at.Add(3 * time.Minute), Since: at, Conn: "S/1", Reason: "Stale Connection"}
	for i, step := range []struct {
		p      Presence
		stored bool
		want   Presence
	}{
		{first, true, first},
		{first, false, first}, // the same event, from a second service
		{closed, true, closed},
		{first, false, closed}, // late
		{second, true, second},
		{stale, false, second},
	} {
		stored, err := ps.Record(t.Context(), step.p)
		if err != nil || stored != step.stored {
			t.Fatalf("step %d: stored %v, %v; want %v", i, stored, err, step.stored)
		}
		got, _, err := ps.Get(t.Context(), "web-1")
		if err != nil || got == nil || *got != step.want {
			t.Fatalf("step %d: got %+v, %v; want %+v", i, got, err, step.want)
		}
	}
	for _, bad := range []Presence{
		{Node: "Web 1", At: at},
		{Node: "web-1"},
		{Node: "web-1", At: at.Add(time.Hour), Reason: strings.Repeat("x", MaxPresenceText+1)},
	} {
		if _, err := ps.Record(t.Context(), bad); !errors.Is(err, ErrBadPresence) {
			t.Errorf("%+v: %v, want ErrBadPresence", bad, err)
		}
	}
	// A record that does not decode is replaced.
	kv, err := js.KeyValue(t.Context(), linkproto.PresenceBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), Key("home", "web-2"), []byte("{")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ps.Get(t.Context(), "web-2"); !errors.Is(err, ErrUndecodable) {
		t.Errorf("an undecodable record: %v, want ErrUndecodable", err)
	}
	p := Presence{Node: "web-2", Connected: true, At: at}
	if stored, err := ps.Record(t.Context(), p); !stored || err != nil {
		t.Errorf("over an undecodable record: %v, %v; want stored", stored, err)
	}
}
