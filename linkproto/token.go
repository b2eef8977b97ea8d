package linkproto

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// tokenPrefix starts every enrolment token, so a token is recognised (and
// a pasted credentials file or a truncated token is told apart) at once.
const tokenPrefix = "meshtoken1."

// ErrBadToken is returned for an enrolment token that does not decode.
var ErrBadToken = errors.New("bad enrolment token")

// Token is what `meshctl enrol NODE` prints and `mesh-host enrol TOKEN`
// reads: everything a host needs to join the mesh. It carries the node's
// secret (its credentials), so it is handled like a password.
type Token struct {
	Protocol int      `json:"protocol"`
	Mesh     string   `json:"mesh"`
	Node     string   `json:"node"`
	URLs     []string `json:"urls"`
	// Creds is the node's NATS credentials file: its user JWT and nkey seed.
	Creds string `json:"creds"`
	// SigningKey is the public half of the mesh's declaration key: the
	// only key whose declarations the node obeys.
	SigningKey string `json:"signing_key"`
	// CA is the mesh's CA certificate, PEM: the node trusts the broker by
	// it and by nothing else.
	CA string `json:"ca"`
}

// Encode renders t as one line of text.
func (t Token) Encode() string {
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(Marshal(t))
}

// ParseToken reads an encoded token and checks every field.
func ParseToken(s string) (Token, error) {
	s = strings.TrimSpace(s)
	body, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return Token{}, fmt.Errorf("%w: it does not start with %q (is it the whole line `meshctl enrol` printed?)", ErrBadToken, tokenPrefix)
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %v (was it cut short?)", ErrBadToken, err)
	}
	var t Token
	if err := json.Unmarshal(raw, &t); err != nil {
		return Token{}, fmt.Errorf("%w: %v", ErrBadToken, err)
	}
	switch {
	case t.Protocol == 0 || t.Protocol > ProtocolVersion:
		return Token{}, fmt.Errorf("%w: protocol %d; this host speaks %d", ErrBadToken, t.Protocol, ProtocolVersion)
	case len(t.URLs) == 0:
		return Token{}, fmt.Errorf("%w: urls: no broker address", ErrBadToken)
	case !strings.Contains(t.Creds, "BEGIN NATS USER JWT") || !strings.Contains(t.Creds, "BEGIN USER NKEY SEED"):
		return Token{}, fmt.Errorf("%w: creds: not a NATS credentials file", ErrBadToken)
	case t.CA == "":
		return Token{}, fmt.Errorf("%w: ca: no certificate authority (a token from a meshctl older than TLS: run `meshctl init` and `meshctl enrol` again)", ErrBadToken)
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
	return t, nil
}

// checkCA checks that caPEM is one certificate, a certificate authority's.
func checkCA(caPEM []byte) error {
	b, rest := pem.Decode(caPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return errors.New("not a PEM certificate")
	}
	if len(strings.TrimSpace(string(rest))) != 0 {
		return errors.New("more than one certificate")
	}
	cert, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return err
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return fmt.Errorf("%q is not a certificate authority", cert.Subject.CommonName)
	}
	return nil
}
