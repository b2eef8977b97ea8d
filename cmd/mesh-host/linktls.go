package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mesh-host/mesh-host/linkproto"
)

// linkTLS decides how the link authenticates the broker, from link.json:
// TLS trusting the CA it names and nothing else; nil with plaintext
// allowed explicitly; and an error for a configuration that names no CA
// and does not say plaintext is meant, so that a hand-edited or old
// link.json never quietly trusts whatever answers at the broker's address.
func linkTLS(dir string, cfg linkConfig) (*tls.Config, error) {
	path := filepath.Join(dir, linkConfigFile)
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
