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
	"time"

	"github.com/nats-io/nkeys"

	"github.com/mesh-host/mesh-host/cmd/internal/atomicfile"
	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/enrolment"
	"github.com/mesh-host/mesh-host/cmd/mesh-host/link"
	"github.com/mesh-host/mesh-host/linkproto"
)

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
		return command.Refused("enrol cannot be asked of a running service")
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
		return command.Refused("%v", err)
	}
	if err := tok.Expired(e.now()); err != nil {
		return command.Refused("%v", err)
	}
	dir := e.cli.StateDir
	if old, err := enrolment.Read(dir); err == nil {
		if (old.Mesh != tok.Mesh || old.Node != tok.Node) && !c.Force {
			return command.Refused("%s already enrols this host as node %s of mesh %s, not %s of %s: use --force to replace it",
				filepath.Join(dir, enrolment.LinkConfigFile), old.Node, old.Mesh, tok.Node, tok.Mesh)
		}
	} else if !errors.Is(err, fs.ErrNotExist) && !c.Force {
		return command.Refused("%v (use --force to replace it)", err)
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
		return command.Refused("enrolment %v", err)
	}
	if err != nil {
		return failed("enrolment: %v", err)
	}
	cfg, err := json.MarshalIndent(enrolment.Config{Mesh: tok.Mesh, Node: tok.Node, URLs: tok.URLs, SigningKey: tok.SigningKey, CAFile: enrolment.CAFile}, "", "  ")
	if err != nil {
		return failed("%v", err)
	}
	// The credentials and the CA first: a link.json is only ever beside
	// what it names.
	if err := atomicfile.Write(filepath.Join(dir, enrolment.CredsFile), creds, 0o600); err != nil {
		return failed("%v", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, enrolment.CAFile), []byte(tok.CA), 0o600); err != nil {
		return failed("%v", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, enrolment.LinkConfigFile), append(cfg, '\n'), 0o600); err != nil {
		return failed("%v", err)
	}
	pub, _ := key.PublicKey()
	fmt.Fprintf(e.stdout, "enrolled as node %s of mesh %s (key %s, made on this host)\n", tok.Node, tok.Mesh, pub)
	fmt.Fprintf(e.stdout, "wrote %s (broker %s)\n", filepath.Join(dir, enrolment.LinkConfigFile), strings.Join(tok.URLs, ", "))
	fmt.Fprintf(e.stdout, "wrote %s (the node's credentials, mode 0600; they expire at %s and the service renews them)\n",
		filepath.Join(dir, enrolment.CredsFile), cred.Expires.UTC().Format(time.RFC3339))
	fmt.Fprintf(e.stdout, "wrote %s (the mesh's CA: the link trusts the broker by it alone)\n", filepath.Join(dir, enrolment.CAFile))
	fmt.Fprintln(e.stdout, "`mesh-host serve` connects with them when it starts (restart it if it runs)")
	return nil
}
