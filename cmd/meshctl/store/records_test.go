package store

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mesh-host/mesh-host/internal/basetest"
)

// A node's refusal record reads back as written, reads as none when there
// is none, and one that does not decode is ErrUndecodable, which the
// control service takes as a refusal.
func TestRefusedTokens(t *testing.T) {
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
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "tokens"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := RefusedTokens(t.Context(), kv, "home", "web-1"); r != nil || err != nil {
		t.Fatalf("none stored: %+v, %v; want nil, nil", r, err)
	}
	want := TokensRefused{Node: "web-1", Before: time.Date(2026, 12, 5, 1, 2, 3, 0, time.UTC), Why: "revoked"}
	if err := RefuseTokens(t.Context(), kv, "home", want); err != nil {
		t.Fatal(err)
	}
	if r, err := RefusedTokens(t.Context(), kv, "home", "web-1"); err != nil || r == nil || *r != want {
		t.Fatalf("read back: %+v, %v; want %+v", r, err, want)
	}
	if _, err := kv.Put(t.Context(), RefusedKey("home", "web-1"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := RefusedTokens(t.Context(), kv, "home", "web-1"); !errors.Is(err, ErrUndecodable) {
		t.Fatalf("a damaged record: %v; want ErrUndecodable", err)
	}
}
