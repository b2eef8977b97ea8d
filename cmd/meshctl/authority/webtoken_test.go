package authority

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWebTokenVerifies(t *testing.T) {
	a, _, err := Init(t.TempDir(), "home")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	tok, issued, err := a.IssueWebToken("alice@ops", now, 12*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	c, err := v.Verify(tok, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if c != issued || c.Operator != "alice@ops" || c.Mesh != "home" || !c.Expires.Equal(now.Add(12*time.Hour)) {
		t.Errorf("claims %+v, issued %+v", c, issued)
	}
	// The key is kept: a verifier made later (serve restarted) agrees.
	again, err := Open(a.Dir)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := again.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v2.Verify(tok, now); err != nil {
		t.Errorf("after reopening: %v", err)
	}
}

func TestWebTokenRefusals(t *testing.T) {
	a, _, err := Init(t.TempDir(), "home")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := Init(t.TempDir(), "home") // same mesh name, other keys
	if err != nil {
		t.Fatal(err)
	}
	elsewhere, _, err := Init(t.TempDir(), "lab")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	tok, _, err := a.IssueWebToken("alice@ops", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	forged, _, err := other.IssueWebToken("alice@ops", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	payload, sig, _ := strings.Cut(strings.TrimPrefix(tok, webTokenPrefix), ".")
	// The other mesh's key, with this mesh's key's signature spliced in.
	labTok, _, err := elsewhere.IssueWebToken("alice@ops", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	labPayload, _, _ := strings.Cut(strings.TrimPrefix(labTok, webTokenPrefix), ".")
	for name, c := range map[string]struct {
		tok  string
		at   time.Time
		want string
	}{
		"another authority's key": {forged, now, "not signed by this mesh"},
		"claims edited":           {webTokenPrefix + labPayload + "." + sig, now, "not signed by this mesh"},
		"signature cut":           {webTokenPrefix + payload, now, "no signature"},
		"expired":                 {tok, now.Add(time.Hour), "expired"},
		"issued in the future":    {tok, now.Add(-time.Hour), "future"},
		"no prefix":               {strings.TrimPrefix(tok, webTokenPrefix), now, "does not start"},
		"too long":                {tok + strings.Repeat("A", MaxWebTokenSize), now, "longer than"},
		"empty":                   {"", now, "does not start"},
	} {
		_, err := v.Verify(c.tok, c.at)
		if !errors.Is(err, ErrBadWebToken) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrBadWebToken saying %q", name, err, c.want)
		}
	}
	// The other mesh's verifier refuses this mesh's token too.
	lv, err := elsewhere.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lv.Verify(labTok, now); err != nil {
		t.Fatal(err)
	}
	if _, err := lv.Verify(tok, now); !errors.Is(err, ErrBadWebToken) {
		t.Errorf("another mesh's token: %v", err)
	}
	for _, name := range []string{"", "bad\x1bname", strings.Repeat("x", MaxWebOperator+1)} {
		if _, _, err := a.IssueWebToken(name, now, time.Hour); err == nil {
			t.Errorf("operator %q: issued", name)
		}
	}
	for _, ttl := range []time.Duration{0, -time.Hour, MaxWebTokenTTL + time.Hour} {
		if _, _, err := a.IssueWebToken("alice", now, ttl); err == nil {
			t.Errorf("ttl %s: issued", ttl)
		}
	}
}

func TestWebTokensRevoked(t *testing.T) {
	a, _, err := Init(t.TempDir(), "home")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	before, _, err := a.IssueWebToken("alice", now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	v, err := a.WebVerifier()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeWebTokens(now.Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	after, _, err := a.IssueWebToken("alice", now.Add(2*time.Millisecond), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The verifier made before the revocation (a running serve) sees it.
	if _, err := v.Verify(before, now.Add(time.Minute)); !errors.Is(err, ErrBadWebToken) || !strings.Contains(err.Error(), "revoked") {
		t.Errorf("a token issued before the revocation: %v", err)
	}
	if _, err := v.Verify(after, now.Add(time.Minute)); err != nil {
		t.Errorf("a token issued after the revocation: %v", err)
	}
}
