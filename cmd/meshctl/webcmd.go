package main

import (
	"fmt"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
)

// webCmd is the web view's side of the operator's tool: its tokens.
type webCmd struct {
	Token  webTokenCmd  `cmd:"" help:"Print a token of the web view for the operator (--operator, default USER@HOSTNAME): signed by the mesh, naming the operator, expiring."`
	Revoke webRevokeCmd `cmd:"" help:"Refuse every web token issued until now, at once (a token that leaked); tokens made after it are accepted."`
}

type webRevokeCmd struct{}

func (c *webRevokeCmd) Run(e *env) error {
	a, err := e.authority()
	if err != nil {
		return err
	}
	now := e.now()
	if err := a.RevokeWebTokens(now); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "every web token of mesh %s issued before %s is refused from now on\n", a.Mesh, now.UTC().Format(time.RFC3339))
	return nil
}

type webTokenCmd struct {
	TTL time.Duration `name:"ttl" default:"12h" help:"How long the token is valid (at most 720h)."`
}

// Run prints the token alone on stdout (a script takes it whole), and
// on stderr whose it is and how to use it. The token is a secret: it is
// printed nowhere else and logged by no one.
func (c *webTokenCmd) Run(e *env) error {
	if c.TTL <= 0 || c.TTL > authority.MaxWebTokenTTL {
		return command.Refused("--ttl %s: a web token is valid for more than 0 and at most %s", c.TTL, authority.MaxWebTokenTTL)
	}
	a, err := e.authority()
	if err != nil {
		return err
	}
	tok, claims, err := a.IssueWebToken(e.operator(), e.now(), c.TTL)
	if err != nil {
		return command.Refused("%v", err)
	}
	fmt.Fprintln(e.stdout, tok)
	fmt.Fprintf(e.stderr, "a web token for %s of mesh %s, valid until %s: paste it on the web view's login page (meshctl serve --http-listen), or send it as \"Authorization: Bearer TOKEN\" (a scraper of /metrics)\n",
		claims.Operator, claims.Mesh, claims.Expires.Format(time.RFC3339))
	return nil
}
