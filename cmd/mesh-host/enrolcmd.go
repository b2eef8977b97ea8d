package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/linkproto"
)

// The enrolment's files in the state directory.
const (
	linkConfigFile = "link.json"
	credsFile      = "node.creds"
	caFile         = "ca.pem"
)

// linkConfig is STATE-DIR/link.json: which node of which mesh this host is,
// and where its broker is. The credentials are beside it in node.creds.
type linkConfig struct {
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

type enrolCmd struct {
	Token string `arg:"" help:"The token 'meshctl enrol NODE' printed, or - to read it from standard input."`
	Force bool   `name:"force" help:"Replace an enrolment as another node or in another mesh."`
}

// Run redeems the token: the node's key pair is made here, only its public
// half is sent, and the credentials a control service signs for it are
// written beside the seed. A token that is edited, expired, already used
// or not this mesh's is refused (here or by the control service), and
// nothing is written.
func (c *enrolCmd) Run(e *env) error {
	if e.held != nil {
		return refused("enrol cannot be asked of a running service")
	}
	text := c.Token
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		if err != nil {
			return failed("read the token from standard input: %v", err)
		}
		text = string(b)
	}
	tok, err := linkproto.ParseToken(text)
	if err != nil {
		return refused("%v", err)
	}
	if err := tok.Expired(e.now()); err != nil {
		return refused("%v", err)
	}
	dir := e.cli.StateDir
	if old, err := readLinkConfig(dir); err == nil {
		if (old.Mesh != tok.Mesh || old.Node != tok.Node) && !c.Force {
			return refused("%s already enrols this host as node %s of mesh %s, not %s of %s: use --force to replace it",
				filepath.Join(dir, linkConfigFile), old.Node, old.Mesh, tok.Node, tok.Mesh)
		}
	} else if !errors.Is(err, fs.ErrNotExist) && !c.Force {
		return refused("%v (use --force to replace it)", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return failed("%v", err)
	}
	key, err := nkeys.CreateUser()
	if err != nil {
		return failed("make the node's key: %v", err)
	}
	sealKey, err := ensureSealKey(dir)
	if err != nil {
		return failed("%v", err)
	}
	sealPub, _ := sealKey.PublicKey()
	creds, cred, err := link.Enrol(e.ctx, tok, key, sealPub)
	if errors.Is(err, link.ErrRefused) {
		return refused("enrolment %v", err)
	}
	if err != nil {
		return failed("enrolment: %v", err)
	}
	cfg, err := json.MarshalIndent(linkConfig{Mesh: tok.Mesh, Node: tok.Node, URLs: tok.URLs, SigningKey: tok.SigningKey, CAFile: caFile}, "", "  ")
	if err != nil {
		return failed("%v", err)
	}
	// The credentials and the CA first: a link.json is only ever beside
	// what it names.
	if err := writeFileAtomic(filepath.Join(dir, credsFile), creds, 0o600); err != nil {
		return failed("%v", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, caFile), []byte(tok.CA), 0o600); err != nil {
		return failed("%v", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, linkConfigFile), append(cfg, '\n'), 0o600); err != nil {
		return failed("%v", err)
	}
	pub, _ := key.PublicKey()
	fmt.Fprintf(e.stdout, "enrolled as node %s of mesh %s (key %s, made on this host)\n", tok.Node, tok.Mesh, pub)
	fmt.Fprintf(e.stdout, "wrote %s (broker %s)\n", filepath.Join(dir, linkConfigFile), strings.Join(tok.URLs, ", "))
	fmt.Fprintf(e.stdout, "wrote %s (the node's credentials, mode 0600; they expire at %s and the service renews them)\n",
		filepath.Join(dir, credsFile), cred.Expires.UTC().Format(time.RFC3339))
	fmt.Fprintf(e.stdout, "wrote %s (the mesh's CA: the link trusts the broker by it alone)\n", filepath.Join(dir, caFile))
	fmt.Fprintln(e.stdout, "`mesh-host serve` connects with them when it starts (restart it if it runs)")
	return nil
}

// readLinkConfig reads STATE-DIR/link.json; an error wrapping
// fs.ErrNotExist means the host is not enrolled.
func readLinkConfig(dir string) (linkConfig, error) {
	path := filepath.Join(dir, linkConfigFile)
	var c linkConfig
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
		return c, fmt.Errorf("%s: signing_key: %v: an enrolment from before declarations were signed; enrol again with a new token (`meshctl enrol %s`)", path, err, c.Node)
	}
	return c, nil
}

// checkCreds refuses a credentials file that others could read or change,
// or that is not the service's own.
func checkCreds(path string) error {
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

// writeFileAtomic replaces path with data: a temporary file beside it,
// written and synced, renamed over it, and the directory synced, so a crash
// leaves the old file or the new one, never a part.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
