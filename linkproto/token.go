package linkproto

import (
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// tokenPrefix starts every enrolment token, so a token is recognised (and
// a pasted credentials file or a truncated token is told apart) at once.
// Version 2 tokens carry no credentials: they are signed, short-lived
// bootstraps redeemed once for credentials signed for a key the host made.
const tokenPrefix = "meshtoken2."

// Errors of enrolment tokens.
var (
	// ErrBadToken is returned for an enrolment token that does not decode,
	// or lacks a field.
	ErrBadToken = errors.New("bad enrolment token")
	// ErrTokenExpired is returned for a token past its expiry.
	ErrTokenExpired = errors.New("enrolment token expired")
)

// Token is what `meshctl enrol NODE` prints and `mesh-host enrol TOKEN`
// reads: which node of which mesh to become, where the broker is, the key
// the mesh signs with, and a bootstrap user that may do one thing: present
// the token to the control service, with the public key the host made, in
// exchange for the node's credentials. It expires, and is redeemed once.
//
// It travels as tokenPrefix + base64(JSON) + "." + base64(signature): the
// signature, by the mesh's declaration key, covers the JSON exactly as it
// travels, so a field added later is signed without a new encoding and any
// edit shows.
type Token struct {
	Protocol int `json:"protocol"`
	// ID names the token: a subject token of 32 lower-case hex digits, the
	// key the control service records its use under.
	ID   string   `json:"id"`
	Mesh string   `json:"mesh"`
	Node string   `json:"node"`
	URLs []string `json:"urls"`
	// SigningKey is the public half of the mesh's declaration key: the
	// only key whose declarations the node obeys, and the token's signer.
	SigningKey string `json:"signing_key"`
	// CA is the mesh's CA certificate, PEM: the node trusts the broker by
	// it and by nothing else.
	CA string `json:"ca"`
	// Expires is when the token stops being redeemable; the bootstrap
	// user's JWT expires then too.
	Expires time.Time `json:"expires"`
	// Issued is when the token was made: one made before its node was
	// revoked or removed is refused. (Tokens made before this field have
	// only their bootstrap JWT's issue time, to the second: IssuedAt.)
	Issued time.Time `json:"issued,omitzero"`
	// Bootstrap is the bootstrap user's JWT: a bearer token (it needs no
	// key, so the token holds no private key at all) allowed only to
	// publish on EnrolSubject(Mesh, ID) and subscribe to
	// EnrolledPrefix(Mesh, ID).
	Bootstrap string `json:"bootstrap"`

	// encoded is the token as it travels, kept by ParseToken so that it is
	// presented exactly as it was signed.
	encoded string
}

// tokenContext starts the bytes a token's signature covers.
const tokenContext = "mesh-host enrolment token 1"

var tokenIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// Sign renders t as one line of text, signed with key (the mesh's
// declaration key, whose public half t.SigningKey must be).
func (t Token) Sign(key nkeys.KeyPair) (string, error) {
	pub, err := key.PublicKey()
	if err != nil {
		return "", err
	}
	if pub != t.SigningKey {
		return "", fmt.Errorf("the token names signing key %s, not the key signing it (%s)", short(t.SigningKey), short(pub))
	}
	body := Marshal(t)
	sig, err := key.Sign(signedBytes(tokenContext, body))
	if err != nil {
		return "", err
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(body) + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// Encoded is the token as it was parsed: what a host presents.
func (t Token) Encoded() string { return t.encoded }

// ParseToken reads an encoded token, checks every field, and checks that
// it is signed by the key it names: an edited or truncated token is
// refused here, before anything is sent. Whether that key is the mesh's is
// for the control service to say (VerifyToken); whether it has expired,
// for the caller with its clock (Token.Expired).
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	rest, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		if strings.HasPrefix(s, "meshtoken1.") {
			return Token{}, fmt.Errorf("%w: a version 1 token (it carried the node's credentials); ask for a new one with `meshctl enrol`", ErrBadToken)
		}
		return Token{}, fmt.Errorf("%w: it does not start with %q (is it the whole line `meshctl enrol` printed?)", ErrBadToken, tokenPrefix)
	}
	body64, sig64, ok := strings.Cut(rest, ".")
	if !ok {
		return Token{}, fmt.Errorf("%w: no signature (was it cut short?)", ErrBadToken)
	}
	body, err := base64.RawURLEncoding.DecodeString(body64)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v (was it cut short?)", ErrBadToken, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(sig64)
	if err != nil {
		return Token{}, fmt.Errorf("%w: signature: %v (was it cut short?)", ErrBadToken, err)
	}
	var t Token
	if err := json.Unmarshal(body, &t); err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	switch {
	case t.Protocol == 0 || t.Protocol > ProtocolVersion:
		return Token{}, fmt.Errorf("%w: protocol %d; this end speaks %d", ErrBadToken, t.Protocol, ProtocolVersion)
	case !tokenIDPattern.MatchString(t.ID):
		return Token{}, fmt.Errorf("%w: id: %q is not 32 lower-case hex digits", ErrBadToken, t.ID)
	case len(t.URLs) == 0:
		return Token{}, fmt.Errorf("%w: urls: no broker address", ErrBadToken)
	case t.CA == "":
		return Token{}, fmt.Errorf("%w: ca: no certificate authority (a token from a meshctl older than TLS: run `meshctl init` and `meshctl enrol` again)", ErrBadToken)
	case t.Expires.IsZero():
		return Token{}, fmt.Errorf("%w: expires: required", ErrBadToken)
	case strings.Count(t.Bootstrap, ".") != 2:
		return Token{}, fmt.Errorf("%w: bootstrap: not a NATS user JWT", ErrBadToken)
	}
	if err := checkCA([]byte(t.CA)); err != nil {
		return Token{}, fmt.Errorf("%w: ca: %v", ErrBadToken, err)
	}
	if err := ValidSigningKey(t.SigningKey); err != nil {
		return Token{}, fmt.Errorf("%w: signing_key: %v", ErrBadToken, err)
	}
	if err := ValidName(t.Mesh); err != nil {
		return Token{}, fmt.Errorf("%w: mesh: %v", ErrBadToken, err)
	}
	if err := ValidName(t.Node); err != nil {
		return Token{}, fmt.Errorf("%w: node: %v", ErrBadToken, err)
	}
	for _, u := range t.URLs {
		p, err := url.Parse(u)
		if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss") {
			return Token{}, fmt.Errorf("%w: urls: %q is not a broker address like nats://host:4222", ErrBadToken, u)
		}
	}
	kp, err := nkeys.FromPublicKey(t.SigningKey)
	if err != nil {
		return Token{}, fmt.Errorf("%w: signing_key: %v", ErrBadToken, err)
	}
	if err := kp.Verify(signedBytes(tokenContext, body), sig); err != nil {
		return Token{}, fmt.Errorf("%w: %w: the token was changed after it was issued (or is not whole); ask for a new one with `meshctl enrol %s`", ErrBadToken, ErrBadSignature, t.Node)
	}
	t.encoded = s
	return t, nil
}

// checkCA checks that caPEM is one certificate, a certificate authority's.
func checkCA(caPEM []byte) error {
	_, n, err := caPool(caPEM)
	if err == nil && n != 1 {
		err = errors.New("more than one certificate")
	}
	return err
}

// TLS is how the holder of t trusts the broker: by the token's CA alone.
func (t Token) TLS() (*tls.Config, error) { return BrokerTLS([]byte(t.CA)) }

// VerifyToken is ParseToken for the control service: the token must also
// be signed by trusted, the mesh's own key, and be for mesh.
func VerifyToken(s, trusted, mesh string) (Token, error) {
	t, err := ParseToken(s)
	if err != nil {
		return t, err
	}
	if t.SigningKey != trusted {
		return t, fmt.Errorf("%w: %w: the token is signed by %s; this mesh signs with %s", ErrBadToken, ErrUntrustedSigner, short(t.SigningKey), short(trusted))
	}
	if t.Mesh != mesh {
		return t, fmt.Errorf("%w: %w: the token is for mesh %s, this is mesh %s", ErrBadToken, ErrWrongNode, t.Mesh, mesh)
	}
	return t, nil
}

// IssuedAt is when t was made: Issued, or for a token made before that
// field its bootstrap JWT's issue time; the zero time when neither says.
// The token's signature covers both.
func (t Token) IssuedAt() time.Time {
	if !t.Issued.IsZero() {
		return t.Issued
	}
	if uc, err := jwt.DecodeUserClaims(t.Bootstrap); err == nil && uc.IssuedAt > 0 {
		return time.Unix(uc.IssuedAt, 0).UTC()
	}
	return time.Time{}
}

// Expired reports, as an error naming when, whether t is past its expiry
// at now.
func (t Token) Expired(now time.Time) error {
	if !now.Before(t.Expires) {
		return fmt.Errorf("%w: it expired at %s (%s ago); ask for a new one with `meshctl enrol %s`",
			ErrTokenExpired, t.Expires.UTC().Format(time.RFC3339), now.Sub(t.Expires).Round(time.Second), t.Node)
	}
	return nil
}

// NewTokenID returns a fresh token id.
func NewTokenID() string {
	return fmt.Sprintf("%x", randomBytes(16))
}
