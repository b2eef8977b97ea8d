package linkproto_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/linkproto"
	"github.com/mesh-host/mesh-host/linkproto/linkprototest"
)

// TestReclaimIsSigned: the reclaim flag is inside the signature when set,
// so setting or clearing it after signing fails; a declaration that is
// no reclaim signs as before the flag existed (a journaled signature
// still verifies).
func TestReclaimIsSigned(t *testing.T) {
	key, err := nkeys.FromSeed([]byte(linkprototest.SigningKeySeed))
	if err != nil {
		t.Fatal(err)
	}
	plain := linkprototest.Push(1, linkprototest.Doc(1, "hi\n"))
	forged := *plain
	forged.Reclaim = true
	if err := forged.Verify(linkprototest.SigningKeyPub); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Fatalf("a push marked a reclaim after signing: %v, want a bad signature", err)
	}
	reclaim := *plain
	reclaim.Reclaim = true
	if err := reclaim.Sign(key); err != nil {
		t.Fatal(err)
	}
	if err := reclaim.Verify(linkprototest.SigningKeyPub); err != nil {
		t.Fatalf("a reclaim signed as one: %v", err)
	}
	if reclaim.Signature == plain.Signature {
		t.Fatal("a reclaim signs as the same declaration without the flag")
	}
	cleared := reclaim
	cleared.Reclaim = false
	if err := cleared.Verify(linkprototest.SigningKeyPub); !errors.Is(err, linkproto.ErrBadSignature) {
		t.Fatalf("a reclaim with its flag cleared: %v, want a bad signature", err)
	}
	if err := linkproto.VerifyStored(linkprototest.SigningKeyPub, "lab", "web-1", 1, "tester", []byte(linkprototest.Doc(1, "hi\n")), plain.Signer, plain.Signature); err != nil {
		t.Fatalf("a stored declaration that is no reclaim: %v", err)
	}
	if err := linkproto.VerifyStoredReclaim(linkprototest.SigningKeyPub, "lab", "web-1", 1, "tester", []byte(linkprototest.Doc(1, "hi\n")), reclaim.Signer, reclaim.Signature, true); err != nil {
		t.Fatalf("a stored reclaim: %v", err)
	}
}

// TestLocalReportCheck: what a node says of its override is bounded and
// printable, and HeartbeatOf carries it.
func TestLocalReportCheck(t *testing.T) {
	ok := linkproto.LocalReport{Revision: 2, Source: "file:/srv/x.yaml", User: "alice", Since: time.Now()}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []linkproto.LocalReport{
		{Source: "file:/x\x1b[2J"},
		{Source: "file:/" + strings.Repeat("x", linkproto.MaxLocalSourceLen)},
		{User: strings.Repeat("u", linkproto.MaxLocalUserLen+1)},
		{User: "\xff"},
	} {
		if err := bad.Check(); err == nil {
			t.Errorf("%+v passed the check", bad)
		}
	}
	for _, u := range []string{"", "al ice", "a\tb", strings.Repeat("u", 65)} {
		if linkproto.ValidLocalUser(u) == nil {
			t.Errorf("ValidLocalUser(%q) passed", u)
		}
	}
}
