// Package enrolment is what enrolling leaves in the host's state
// directory, as the service and the enrol command read and write it:
// link.json (which node of which mesh, where its broker is, the key its
// declarations are signed by), node.creds (the node's credentials, renewed
// in place) and ca.pem (the mesh's CA, by which the link trusts the
// broker).
//
// It does not enrol (the enrol command redeems the token) and does not run
// the link (package link does).
package enrolment

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/internal/atomicfile"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The Load's files in the state directory.
const (
	LinkConfigFile = "link.json"
	CredsFile      = "node.creds"
	CAFile         = "ca.pem"
)

// Config is STATE-DIR/link.json: which node of which mesh this host is,
// and where its broker is. The credentials are beside it in node.creds.
type Config struct {
	Mesh string   `json:"mesh"`
	Node string   `json:"node"`
	URLs []string `json:"urls"`
	// SigningKey is the mesh's declaration key (public): the host obeys
	// declarations signed by it and nothing else.
	SigningKey string `json:"signing_key"`
	// CAFile is the mesh's CA certificate, the only one the link trusts
	// the broker by; relative to the state directory unless absolute.
	CAFile string `json:"ca_file,omitempty"`
	// AllowPlaintext lets the link run without TLS, the broker not
	// authenticated. Enrol never writes it; an operator who means it does.
	AllowPlaintext bool `json:"allow_plaintext,omitempty"`
}

// Read reads STATE-DIR/link.json; an error wrapping
// fs.ErrNotExist means the host is not enrolled.
func Read(dir string) (Config, error) {
	path := filepath.Join(dir, LinkConfigFile)
	var c Config
	b, err := os.ReadFile(path)
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: %v", path, err)
	}
	if err := linkproto.ValidName(c.Mesh); err != nil {
		return c, fmt.Errorf("%s: mesh: %v", path, err)
	}
	if err := linkproto.ValidName(c.Node); err != nil {
		return c, fmt.Errorf("%s: node: %v", path, err)
	}
	if len(c.URLs) == 0 {
		return c, fmt.Errorf("%s: urls: no broker address", path)
	}
	if err := linkproto.ValidSigningKey(c.SigningKey); err != nil {
		return c, fmt.Errorf("%s: signing_key: %v: an Load from before declarations were signed; enrol again with a new token (`meshctl enrol %s`)", path, err, c.Node)
	}
	return c, nil
}

// CheckCreds refuses a credentials file that others could read or change,
// or that is not the service's own.
func CheckCreds(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("the node's credentials: %w (run `mesh-host enrol` again)", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%s is readable or writable by others (mode %04o); it holds the node's secret: run `chmod 600 %s`", path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s is owned by uid %d, not by uid %d that runs the service: run `chown %d %s` and `chmod 600 %s`", path, st.Uid, os.Geteuid(), os.Geteuid(), path, path)
	}
	return nil
}

// Load reads the link's configuration and checks the credentials
// beside it; linked is false when the host is not enrolled.
func Load(dir string) (cfg Config, creds string, linked bool, err error) {
	cfg, err = Read(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return cfg, "", false, nil
	}
	if err != nil {
		return cfg, "", false, err
	}
	creds = filepath.Join(dir, CredsFile)
	if err := CheckCreds(creds); err != nil {
		return cfg, "", false, err
	}
	return cfg, creds, true, nil
}

// NodeCreds is STATE-DIR/node.creds as the link renews it: the node's
// user JWT and its seed, which never leaves this file.
type NodeCreds struct{ Path string }

var _ link.Credentials = NodeCreds{}

// read returns the file's JWT claims and its key pair.
func (f NodeCreds) read() (*jwt.UserClaims, nkeys.KeyPair, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, nil, err
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	claims, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	return claims, kp, nil
}

// Current is the key the credentials are for and their lifetime. A JWT
// that never expires is never due for renewal.
func (f NodeCreds) Current() (string, time.Time, time.Time, error) {
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
func (f NodeCreds) Replace(token string) error {
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
	return atomicfile.Write(f.Path, b, 0o600)
}

// TLS decides how the link authenticates the broker, from link.json:
// TLS trusting the CA it names and nothing else; nil with plaintext
// allowed explicitly; and an error for a configuration that names no CA
// and does not say plaintext is meant, so that a hand-edited or old
// link.json never quietly trusts whatever answers at the broker's address.
func TLS(dir string, cfg Config) (*tls.Config, error) {
	path := filepath.Join(dir, LinkConfigFile)
	switch {
	case cfg.CAFile != "" && cfg.AllowPlaintext:
		return nil, fmt.Errorf("%s: ca_file and allow_plaintext both set: remove allow_plaintext, the link verifies the broker with the CA", path)
	case cfg.AllowPlaintext:
		return nil, nil
	case cfg.CAFile == "":
		return nil, fmt.Errorf("%s names no ca_file: nothing would authenticate the broker at %s, and the link would apply what any server there pushed; enrol again with a new token from `meshctl enrol` (it carries the mesh's CA), or, to run without TLS knowingly, set \"allow_plaintext\": true in it",
			path, strings.Join(cfg.URLs, ", "))
	}
	ca := cfg.CAFile
	if !filepath.IsAbs(ca) {
		ca = filepath.Join(dir, ca)
	}
	fi, err := os.Stat(ca)
	if err != nil {
		return nil, fmt.Errorf("%s: ca_file: %w (run `mesh-host enrol` again)", path, err)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return nil, fmt.Errorf("%s is writable by others (mode %04o); whoever can write it chooses which broker the link trusts: run `chmod 600 %s`", ca, perm, ca)
	}
	b, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	tc, err := linkproto.BrokerTLS(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ca, err)
	}
	return tc, nil
}
