package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/mesh-host/mesh-host/cmd/meshctl/authority"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

func isRelease(s drivers.Spec) bool {
	a, ok := s.(*drivers.ArchiveSpec)
	return ok && strings.HasPrefix(a.Path, authority.VersionsDir+"/")
}

// withRelease returns a copy of d (nil: a first declaration of mesh and
// node) that delivers the release resource res, one revision later: res
// takes the place of the host release d delivers, if any (a node keeps the
// version it runs and its predecessor on disk by itself: the host releases
// a version directory rather than remove it when no declaration names it),
// or is added after d's resources. changed is false when d already
// delivers exactly res; then d is returned as it is.
func withRelease(d *declaration.Declaration, mesh, node string, res *drivers.ArchiveSpec) (out *declaration.Declaration, changed bool, err error) {
	if d == nil {
		d = &declaration.Declaration{Mesh: mesh, Node: node}
	}
	var resources []drivers.Spec
	var previous []drivers.ArchiveSpec
	placed := false
	for _, s := range d.Resources {
		if !isRelease(s) {
			resources = append(resources, s)
			continue
		}
		previous = append(previous, *s.(*drivers.ArchiveSpec))
		if !placed { // where the previous release was, to keep the order
			resources = append(resources, res)
			placed = true
		}
	}
	if !placed {
		resources = append(resources, res)
	}
	if d.Revision > 0 && len(previous) == 1 && drivers.SpecDigest(&previous[0]) == drivers.SpecDigest(res) {
		return d, false, nil
	}
	next := &declaration.Declaration{Mesh: d.Mesh, Node: d.Node, Revision: d.Revision + 1, Resources: resources}
	// Through the parser, so that what is pushed passed the rules the
	// node holds it to.
	doc, err := next.MarshalJSON()
	if err != nil {
		return nil, false, err
	}
	out, err = declaration.ParseJSON(fmt.Sprintf("%s's declaration with the release", node), doc)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrRefused, err)
	}
	return out, true, nil
}

// Release declares the release resource res for node: the node's stored
// declaration with res in place of its previous host release, one
// revision later, stored and pushed as Declare does. A node with no
// declaration gets one holding only res.
func (c *Client) Release(ctx context.Context, out io.Writer, node string, res *drivers.ArchiveSpec, opt DeclareOptions) error {
	if err := linkproto.ValidName(node); err != nil {
		return fmt.Errorf("%w: node: %w", ErrRefused, err)
	}
	entry, err := c.readStored(ctx, node)
	if err != nil {
		return err
	}
	d, changed, err := withRelease(entry.Declaration(), c.Mesh, node, res)
	if err != nil {
		return err
	}
	if !changed {
		fmt.Fprintf(out, "%s: revision %d already delivers this release; pushing it again\n", node, d.Revision)
	}
	online, err := c.declare(ctx, out, node, d, opt)
	if err != nil || !online || opt.Wait <= 0 {
		// An offline node runs the release when it reconnects: nothing
		// to wait for now.
		return err
	}
	return c.waitRunning(ctx, out, node, strings.TrimPrefix(res.Digest, "sha256:"), opt.Wait)
}

// waitRunning waits for node's heartbeats to say it runs version, or that
// its launcher rolled version back (ErrRolledBack, with the launcher's
// reason from the node's journal).
func (c *Client) waitRunning(ctx context.Context, out io.Writer, node, version string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		hb, err := c.lastHeartbeat(ctx, node)
		switch {
		case err != nil && ctx.Err() == nil:
			return err
		case hb != nil && hb.Version == version:
			fmt.Fprintf(out, "%s runs release %s\n", node, VersionLabel(hb.Build, hb.Version))
			return nil
		case hb != nil && slices.Contains(hb.Bad, version):
			why := c.rollbackReason(ctx, node, version, hb.Head)
			return fmt.Errorf("%w: %s's launcher rolled release %s back to %s: %s", ErrRolledBack, node, short(version), VersionLabel(hb.Build, hb.Version), why)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s did not report running release %s within %v (`meshctl nodes` shows what it runs)", ErrNotApplied, node, short(version), wait)
		case <-tick.C:
		}
	}
}

// rollbackReason is the reason the node journaled for rolling version
// back: its latest version.rolled-back from it, among its last records.
func (c *Client) rollbackReason(ctx context.Context, node, version string, head uint64) string {
	from := uint64(1)
	if head > 1000 {
		from = head - 1000
	}
	why := "the node's journal does not say why yet"
	_ = c.Records(ctx, node, from, func(r event.Record) error {
		var p event.VersionRolledBackPayload
		if r.Kind == event.VersionRolledBack && json.Unmarshal(r.Payload, &p) == nil && p.From == version {
			why = p.Reason
		}
		return nil
	})
	return why
}

// ReleaseServer serves the releases directory over HTTP to the nodes:
// GET and HEAD of /NAME, where NAME is a stored release's name (a sha256
// and a format). Nothing else is served: no listing, no other name, no
// path with a second segment. Releases are not secret (a node checks the
// digest, which the declaration carries over the authenticated link), so
