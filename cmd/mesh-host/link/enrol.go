package link

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/linkproto"
)

// ErrRefused is returned by Enrol and renewals when the control service
// answered with a refusal; the error names its reason.
var ErrRefused = errors.New("refused by the control service")

// enrolTimeout bounds the wait for a control service to answer.
const enrolTimeout = 10 * time.Second

// Enrol redeems tok: it connects as the token's bootstrap user to a broker
// proven by the token's CA alone, presents the token with the public
// half of key (made on this host; its private half is sent nowhere) and
// the node's public sealing key, and returns the node's credentials file:
// the JWT the control service signed for that key, and key's seed.
func Enrol(ctx context.Context, tok linkproto.Token, key nkeys.KeyPair, sealKey string) ([]byte, linkproto.Credential, error) {
	pub, err := key.PublicKey()
	if err != nil {
		return nil, linkproto.Credential{}, err
	}
	tlsConfig, err := tok.TLS()
	if err != nil {
		return nil, linkproto.Credential{}, fmt.Errorf("%w: ca: %v", linkproto.ErrBadToken, err)
	}
	nc, err := nats.Connect(strings.Join(tok.URLs, ","),
		nats.Secure(tlsConfig),
		nats.Name("mesh-host enrol "+tok.Mesh+"/"+tok.Node),
		// A bearer JWT: the broker asks for no signature.
		nats.UserJWT(func() (string, error) { return tok.Bootstrap, nil }, func([]byte) ([]byte, error) { return nil, nil }),
		nats.CustomInboxPrefix(linkproto.EnrolledPrefix(tok.Mesh, tok.ID)),
		nats.Timeout(5*time.Second),
	)
	if err != nil {
		if strings.Contains(strings.ToLower(err.Error()), "authorization violation") {
			return nil, linkproto.Credential{}, fmt.Errorf("%w: the broker at %s refused the token (%v): it expired, or it is not this broker's mesh",
				ErrRefused, strings.Join(tok.URLs, ", "), err)
		}
		return nil, linkproto.Credential{}, fmt.Errorf("connect to %s: %w", strings.Join(tok.URLs, ", "), err)
	}
	defer nc.Close()
	req := linkproto.Enrol{Protocol: linkproto.ProtocolVersion, Token: tok.Encoded(), Key: pub, SealKey: sealKey, Nonce: linkproto.NewNonce()}
	ctx, cancel := context.WithTimeout(ctx, enrolTimeout)
	defer cancel()
	m, err := nc.RequestWithContext(ctx, linkproto.EnrolSubject(tok.Mesh, tok.ID), linkproto.Marshal(req))
	if err != nil {
		return nil, linkproto.Credential{}, fmt.Errorf("no control service answered the enrolment (is `meshctl serve` running?): %w", err)
	}
	c, err := credential(m.Data, tok.SigningKey, tok.Mesh, tok.Node, req.Nonce)
	if err != nil {
		return nil, c, err
	}
	creds, err := credsFile(c, pub, key)
	return creds, c, err
}

// credential reads and verifies an answer to an enrolment or renewal.
func credential(data []byte, trust, mesh, node, nonce string) (linkproto.Credential, error) {
	var c linkproto.Credential
	if err := linkproto.Decode(data, linkproto.MaxReportSize, &c); err != nil {
		return c, err
	}
	if err := c.Verify(trust, mesh, node, nonce); err != nil {
		return c, err
	}
	if c.Refused != "" {
		return c, fmt.Errorf("%w: %s", ErrRefused, c.Refused)
	}
	return c, nil
}

// credsFile is the credentials file of c's JWT and key, after checking
// that the JWT is for key.
func credsFile(c linkproto.Credential, pub string, key nkeys.KeyPair) ([]byte, error) {
	claims, err := jwt.DecodeUserClaims(c.JWT)
	if err != nil {
		return nil, fmt.Errorf("the credentials answered: %w", err)
	}
	if claims.Subject != pub {
		return nil, fmt.Errorf("the credentials answered are for key %s, not this node's %s", claims.Subject, pub)
	}
	seed, err := key.Seed()
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(c.JWT, seed)
}
