package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/internal/command"
	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/cmd/meshctl/client"
	"github.com/mesh-host/mesh-host/linkproto"
)

// releaseCmd delivers a host build: it keeps the archive in DATA/releases
// (which serve serves) and, for each node, declares its stored declaration
// again with the release's archive resource in place of the previous one,
// one revision later.
type releaseCmd struct {
	Archive string        `arg:"" name:"ARCHIVE" type:"existingfile" help:"The host build: a tar.gz, tar.zst, tar or zip holding an executable mesh-host at its top."`
	Nodes   []string      `name:"nodes" sep:"," placeholder:"NODE" xor:"which" required:"" help:"The nodes to deliver it to, separated by commas, one after another."`
	Select  string        `name:"select" placeholder:"SEL" xor:"which" required:"" help:"Deliver it by rollout to the nodes a selector chooses, in waves (see the wave flags); a node rolling it back halts the rollout and marks the build bad for the mesh."`
	URL     string        `name:"url" placeholder:"BASE" help:"Base URL nodes fetch releases from (default: where serve records it serves DATA/releases)."`
	Wait    time.Duration `name:"wait" default:"5m" help:"How long to wait for each node to report the apply, then to run the release or roll it back (0: do not wait)."`
	Force   bool          `name:"force" help:"Deliver to nodes the mesh does not know yet (never enrolled, nothing declared, never heard)."`
	waveFlags
}

func (c *releaseCmd) Run(e *env) error {
	for _, n := range c.Nodes {
		if err := linkproto.ValidName(n); err != nil {
			return command.Refused("--nodes: %v", err)
		}
	}
	a, err := e.authority()
	if err != nil {
		return err
	}
	base := c.URL
	if base == "" {
		if base, err = a.ReleasesURL(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return failed("%v", err)
		}
		if base == "" {
			return command.Refused("no releases URL: start `meshctl serve` (it records where it serves releases) or give --url")
		}
	}
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return command.Refused("--url %q: want http://HOST[:PORT][/PATH] or https://…", base)
	}

	r, err := authority.StoreRelease(a.ReleasesDir(), c.Archive)
	if err != nil {
		return err
	}
	res := r.Resource(base)
	label := ""
	if l := authority.ReleaseLabel(c.Archive); l != "" {
		label = l + ", "
	}
	fmt.Fprintf(e.stdout, "release %s (%s%s): nodes fetch %s into %s/%s\n", r.Digest, label, r.Format, res.Source, authority.VersionsDir, r.Version())

	cl, nc, err := e.client()
	if err != nil {
		return err
	}
	defer nc.Close()
	if c.Select != "" || len(c.Nodes) == 0 {
		opt, err := c.options(c.Select)
		if err != nil {
			return err
		}
		opt.Release = res
		ro, err := cl.StartRollout(e.ctx, opt)
		if err != nil {
			return err
		}
		return follow(e, cl, ro, c.Detach)
	}
	if bad, err := cl.BadRelease(e.ctx, r.Digest); err != nil {
		return err
	} else if bad != nil {
		return command.Refused("release %s is bad for this mesh: %s rolled it back (%s) in rollout %s", r.Version()[:12], bad.Node, bad.Reason, bad.Rollout)
	}
	// Every node is tried: one node's refusal says nothing about the
	// next. The command fails when any node refused, failed, or rolled
	// the release back; the error names each, with why.
	var errs []error
	var rolledBack []string
	for _, n := range c.Nodes {
		if !c.Force {
			if err := cl.MustKnow(e.ctx, n); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w (or --force)", n, err))
				continue
			}
		}
		if err := cl.Release(e.ctx, e.stdout, n, res, client.DeclareOptions{Wait: c.Wait}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			if errors.Is(err, client.ErrRolledBack) {
				rolledBack = append(rolledBack, n)
			}
		}
	}
	if len(rolledBack) > 0 {
		errs = append(errs, fmt.Errorf("release %s rolled back on %d of %d nodes: %s", r.Version()[:12], len(rolledBack), len(c.Nodes), strings.Join(rolledBack, ", ")))
	}
	return errors.Join(errs...)
}
