package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
)

// nodeCreds is STATE-DIR/node.creds as the link renews it: the node's
// user JWT and its seed, which never leaves this file.
type nodeCreds struct{ path string }

var _ link.Credentials = nodeCreds{}

// read returns the file's JWT claims and its key pair.
func (f nodeCreds) read() (*jwt.UserClaims, nkeys.KeyPair, error) {
	b, err := os.ReadFile(f.path)
	if err != nil {
		return nil, nil, err
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.path, err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return claims, kp, nil
}

// Current is the key the credentials are for and their lifetime. A JWT
// that never expires is never due for renewal.
func (f nodeCreds) Current() (string, time.Time, time.Time, error) {
	claims, _, err := f.read()
	if err != nil {
		return "", time.Time{}, time.Time{}, err
	}
	if claims.Expires == 0 {
		return claims.Subject, time.Unix(claims.IssuedAt, 0), time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), nil
	}
	return claims.Subject, time.Unix(claims.IssuedAt, 0), time.Unix(claims.Expires, 0), nil
}

// Replace writes token with the file's own seed, atomically.
func (f nodeCreds) Replace(token string) error {
	claims, kp, err := f.read()
	if err != nil {
		return err
	}
	next, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return err
	}
	if next.Subject != claims.Subject {
		return fmt.Errorf("the new credentials are for key %s, the file's for %s", next.Subject, claims.Subject)
	}
	seed, err := kp.Seed()
	if err != nil {
		return err
	}
	b, err := jwt.FormatUserConfig(strings.TrimSpace(token), seed)
	if err != nil {
		return err
	}
	return writeFileAtomic(f.path, b, 0o600)
}
