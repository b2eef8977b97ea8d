package authority

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nkeys"
)

// webSeedFile signs the tokens of the web view (meshctl web token): a key
// of its own, so that nothing it signs can be taken for a declaration,
// and so that it can be replaced (every web token with it) without
// touching what nodes trust.
const webSeedFile = "web.nk"

// webNotBeforeFile holds the time before which no web token is accepted
// (meshctl web revoke): a token that leaked is refused without a new key.
const webNotBeforeFile = "web-not-before"

// webTokenPrefix starts every web token: its format, and what it is for.
const webTokenPrefix = "meshweb1."

// webSignedContext is signed before a token's claims: a signature made by
// the web key for anything else does not verify as a token.
const webSignedContext = "mesh-host web token\x00"

// Bounds of a web token: what a browser or a scraper presents is read no
// further than this, and an operator's name no longer.
const (
	MaxWebTokenSize   = 1024
	MaxWebOperator    = 128
	MaxWebTokenTTL    = 30 * 24 * time.Hour
	webTokenClockSkew = time.Minute
)

// ErrBadWebToken is returned, wrapped with the reason, for a web token
// that is not the mesh's, is damaged, or has expired.
var ErrBadWebToken = errors.New("not a valid web token of this mesh")

// WebClaims is what a web token says: whose it is and until when.
type WebClaims struct {
	Mesh     string    `json:"mesh"`
	Operator string    `json:"operator"`
	Issued   time.Time `json:"iat"`
	Expires  time.Time `json:"exp"`
	// ID tells two tokens of one operator apart, in the log.
	ID string `json:"id"`
}

// IssueWebToken signs a token of the web view for operator, valid for ttl
// from now (at most MaxWebTokenTTL).
func (a *Authority) IssueWebToken(operator string, now time.Time, ttl time.Duration) (string, WebClaims, error) {
	if err := validWebOperator(operator); err != nil {
		return "", WebClaims{}, err
	}
	if ttl <= 0 || ttl > MaxWebTokenTTL {
		return "", WebClaims{}, fmt.Errorf("a web token's ttl is more than 0 and at most %s, not %s", MaxWebTokenTTL, ttl)
	}
	key, err := a.webKey()
	if err != nil {
		return "", WebClaims{}, err
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return "", WebClaims{}, err
	}
	now = now.UTC()
	c := WebClaims{Mesh: a.Mesh, Operator: operator, Issued: now, Expires: now.Add(ttl), ID: hex.EncodeToString(id)}
	body, err := json.Marshal(c)
	if err != nil {
		return "", WebClaims{}, err
	}
	payload := base64.RawURLEncoding.EncodeToString(body)
	sig, err := key.Sign([]byte(webSignedContext + payload))
	if err != nil {
		return "", WebClaims{}, err
	}
	tok := webTokenPrefix + payload + "." + base64.RawURLEncoding.EncodeToString(sig)
	if len(tok) > MaxWebTokenSize {
		return "", WebClaims{}, fmt.Errorf("the web token would be %d bytes, over %d", len(tok), MaxWebTokenSize)
	}
	return tok, c, nil
}

// WebVerifier checks web tokens with the mesh's web key: what the web
// view holds, rather than the whole authority.
type WebVerifier struct {
	mesh string
	key  nkeys.KeyPair // its public half is what verifies
	// notBefore is read from dir at each check, as a revocation made by
	// another process (meshctl web revoke) must hold at once.
	dir string
}

// WebVerifier returns the checker of this mesh's web tokens, making the
// web key on first use.
func (a *Authority) WebVerifier() (*WebVerifier, error) {
	key, err := a.webKey()
	if err != nil {
		return nil, err
	}
	pub, err := key.PublicKey()
	if err != nil {
		return nil, err
	}
	verify, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return &WebVerifier{mesh: a.Mesh, key: verify, dir: a.Dir}, nil
}

// Verify checks tok (signed by this mesh's web key, for this mesh, issued
// and not expired at now) and returns its claims. Every refusal is
// ErrBadWebToken, with a reason fit to show the person who presented it.
func (v *WebVerifier) Verify(tok string, now time.Time) (WebClaims, error) {
	bad := func(format string, a ...any) (WebClaims, error) {
		return WebClaims{}, fmt.Errorf("%w: %s", ErrBadWebToken, fmt.Sprintf(format, a...))
	}
	if len(tok) > MaxWebTokenSize {
		return bad("longer than %d bytes", MaxWebTokenSize)
	}
	rest, ok := strings.CutPrefix(tok, webTokenPrefix)
	if !ok {
		return bad("it does not start with %s", webTokenPrefix)
	}
	payload, sig64, ok := strings.Cut(rest, ".")
	if !ok {
		return bad("it has no signature")
	}
	sig, err := base64.RawURLEncoding.DecodeString(sig64)
	if err != nil {
		return bad("its signature does not decode")
	}
	if err := v.key.Verify([]byte(webSignedContext+payload), sig); err != nil {
		return bad("it is not signed by this mesh's web key")
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return bad("its claims do not decode")
	}
	var c WebClaims
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return bad("its claims do not decode")
	}
	switch {
	case c.Mesh != v.mesh:
		return bad("it is for mesh %q", c.Mesh)
	case validWebOperator(c.Operator) != nil:
		return bad("its operator is not a name")
	case c.Issued.IsZero() || c.Expires.IsZero() || !c.Expires.After(c.Issued) || c.Expires.Sub(c.Issued) > MaxWebTokenTTL:
		return bad("its lifetime is not one this mesh issues")
	case now.Add(webTokenClockSkew).Before(c.Issued):
		return bad("it was issued in the future (%s)", c.Issued.Format(time.RFC3339))
	case !now.Before(c.Expires):
		return bad("it expired at %s", c.Expires.Format(time.RFC3339))
	}
	nb, err := readWebNotBefore(v.dir)
	if err != nil {
		// Not knowing what was revoked refuses everything.
		return bad("the revocation record does not read: %v", err)
	}
	if c.Issued.Before(nb) {
		return bad("every web token issued before %s was revoked", nb.Format(time.RFC3339))
	}
	return c, nil
}

// RevokeWebTokens refuses, from now on, every web token issued before now.
func (a *Authority) RevokeWebTokens(now time.Time) error {
	return writeFile(filepath.Join(a.Dir, webNotBeforeFile), []byte(now.UTC().Format(time.RFC3339Nano)+"\n"))
}

// readWebNotBefore is the time of the latest revocation; zero for none.
func readWebNotBefore(dir string) (time.Time, error) {
	b, err := os.ReadFile(filepath.Join(dir, webNotBeforeFile))
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
}

// validWebOperator: an operator's name is shown on every page and in the
// log; printable, bounded, not empty.
func validWebOperator(name string) error {
	if name == "" || len(name) > MaxWebOperator {
		return fmt.Errorf("an operator's name is 1 to %d bytes", MaxWebOperator)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("an operator's name is printable: %q", name)
		}
	}
	return nil
}

// webKey reads the web key, making it on first use.
func (a *Authority) webKey() (nkeys.KeyPair, error) {
	return keyFile(a.Dir, webSeedFile, nkeys.CreateUser, func(seed []byte) (nkeys.KeyPair, error) {
		kp, err := nkeys.FromSeed(seed)
		if err != nil {
			return nil, err
		}
		if pub, _ := kp.PublicKey(); !nkeys.IsValidPublicUserKey(pub) {
			return nil, errors.New("not a web key")
		}
		return kp, nil
	})
}
