package client

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/mesh-host/mesh-host/cmd/meshctl/store"
	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/profile"
)

// fleet is what rendering needs, read once for many nodes: the profiles,
// every node's labels, and, when a profile asks for them, facts.
type fleet struct {
	c         *Client
	ctx       context.Context
	profiles  []*profile.Parsed
	revisions map[string]uint64 // profile name → its record's revision
	labels    map[string]labels.Set
	known     []string // nil until nodes reads it
	// needFacts says some profile names a fact: only then are the
	// nodes' reports read. mu guards facts, which rendering fills in
	// from several goroutines.
	needFacts bool
	mu        sync.Mutex
	facts     map[string]map[string]string
}

// loadFleet reads the profiles and the nodes' labels. Which nodes the
// mesh knows is read only when asked for (nodes): rendering a given node
// does not need it.
func (c *Client) loadFleet(ctx context.Context) (*fleet, error) {
	recs, err := c.Profiles(ctx)
	if err != nil {
		return nil, err
	}
	f := &fleet{c: c, ctx: ctx, revisions: map[string]uint64{}, facts: map[string]map[string]string{}}
	for _, r := range recs {
		p, err := profile.Parse(r.Profile)
		if err != nil {
			// Stored profiles were checked as they were set; one that no
			// longer parses was written by something else.
			return nil, fmt.Errorf("stored profile %s does not parse: %w", r.Name, err)
		}
		f.profiles = append(f.profiles, p)
		f.revisions[r.Name] = r.Revision
		f.needFacts = f.needFacts || p.UsesFacts()
	}
	if f.labels, err = c.Labels(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// replace puts p in place of the stored profile of its name, or adds it.
func (f *fleet) replace(p *profile.Parsed) {
	f.profiles = slices.DeleteFunc(f.profiles, func(q *profile.Parsed) bool { return q.Name == p.Name })
	f.profiles = append(f.profiles, p)
	f.needFacts = f.needFacts || p.UsesFacts()
}

// nodes are the known nodes, sorted: those with labels and those
// `meshctl nodes` lists, read once.
func (f *fleet) nodes() ([]string, error) {
	if f.known == nil {
		all, err := f.c.Nodes(f.ctx)
		if err != nil {
			return nil, err
		}
		known := map[string]bool{}
		for _, n := range all {
			known[n.Node] = true
		}
		for n := range f.labels {
			known[n] = true
		}
		f.known = slices.Sorted(maps.Keys(known))
	}
	return f.known, nil
}

// selected are the known nodes sel selects, sorted.
func (f *fleet) selected(sel labels.Selector) ([]string, error) {
	all, err := f.nodes()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range all {
		if sel.Matches(f.labels[n]) {
			out = append(out, n)
		}
	}
	return out, nil
}

// node is what rendering knows of a node. Its facts are read from its
// latest report, once, and only when a profile may need them.
func (f *fleet) node(name string) profile.Node {
	n := profile.Node{Mesh: f.c.Mesh, Name: name, Labels: f.labels[name]}
	if !f.needFacts {
		return n
	}
	f.mu.Lock()
	facts, ok := f.facts[name]
	f.mu.Unlock()
	if !ok {
		if r, err := f.c.Report(f.ctx, name); err == nil && r.State.Facts != nil {
			facts = profile.Facts(*r.State.Facts)
		}
		f.mu.Lock()
		f.facts[name] = facts
		f.mu.Unlock()
	}
	n.Facts = facts
	return n
}

// Rendered is a node's declaration as the profiles make it, beside what is
// stored for it.
type Rendered struct {
	Node string
	// Declaration is at the revision the node would get: the stored one
	// when the content is unchanged, the next one when it changed.
	Declaration *declaration.Declaration
	// Profiles are the names of the profiles it was made of, in order.
	Profiles []string
	// Changed says Declaration differs from Stored in content.
	Changed bool
	// read is the stored entry it was rendered over, which a push of
	// Declaration is stored over (nil when there is none).
	read *store.Entry
}

// Stored is the stored declaration, nil when there is none.
func (r *Rendered) Stored() *declaration.Declaration { return r.read.Declaration() }

// StoredAsDeclared is the stored declaration with its secrets named only,
// as an operator declared them (nil when there is none): sealed anew, a
// secret differs in its bytes, not in what was declared.
func (r *Rendered) StoredAsDeclared() *declaration.Declaration {
	if stored := r.Stored(); stored != nil {
		return withoutSealed(stored)
	}
	return nil
}

// Render renders node's declaration from the profiles. A node no profile
// selects is profile.ErrNoProfile: not a refusal, since a rollout leaves
// it alone; a conflict or a bad profile is.
func (c *Client) Render(ctx context.Context, node string) (*Rendered, error) {
	if err := c.MustKnow(ctx, node); err != nil {
		return nil, err
	}
	f, err := c.loadFleet(ctx)
	if err != nil {
		return nil, err
	}
	return f.render(node)
}

// render renders node, numbering the result after what is stored.
func (f *fleet) render(node string) (*Rendered, error) {
	read, err := f.c.readStored(f.ctx, node)
	if err != nil {
		return nil, err
	}
	stored := read.Declaration()
	next := uint64(1)
	if stored != nil {
		next = stored.Revision + 1
	}
	d, names, err := profile.Render(f.node(node), f.profiles, next)
	if err != nil {
		return nil, err
	}
	if d, err = keepRelease(d, stored); err != nil {
		return nil, err
	}
	r := &Rendered{Node: node, Declaration: d, Profiles: names, Changed: true, read: read}
	if stored != nil {
		same := *d
		same.Revision = stored.Revision
		if withoutSealed(&same).Digest() == withoutSealed(stored).Digest() {
			r.Declaration, r.Changed = &same, false
		}
	}
	return r, nil
}

// storedFor is node's stored declaration, nil when there is none.
func (c *Client) storedFor(ctx context.Context, node string) (*declaration.Declaration, error) {
	e, err := c.readStored(ctx, node)
	return e.Declaration(), err
}

// readStored reads node's entry, nil when there is none.
func (c *Client) readStored(ctx context.Context, node string) (*store.Entry, error) {
	desired, err := c.store.Desired(ctx, c.Mesh)
	if err != nil {
		return nil, err
	}
	return desired.Get(ctx, node)
}

// NodeDiff is one node's change: what it has stored against what the
// profiles render for it.
type NodeDiff struct {
	Node     string
	Rendered *Rendered
	// Err is why the node does not render (profile.ErrNoProfile, a
	// conflict, a missing label or fact).
	Err error
}

// Diff renders every known node sel selects.
func (c *Client) Diff(ctx context.Context, sel labels.Selector) ([]NodeDiff, error) {
	f, err := c.loadFleet(ctx)
	if err != nil {
		return nil, err
	}
	selected, err := f.selected(sel)
	if err != nil {
		return nil, err
	}
	var out []NodeDiff
	for _, n := range selected {
		r, err := f.render(n)
		out = append(out, NodeDiff{Node: n, Rendered: r, Err: err})
	}
	return out, nil
}

// keepRelease adds to d the host release stored declares, when d declares
// none: the host's version is the mesh's (meshctl release), not a
// profile's, and a rollout of profiles must not take it away.
func keepRelease(d, stored *declaration.Declaration) (*declaration.Declaration, error) {
	if stored == nil || slices.ContainsFunc(d.Resources, isRelease) {
		return d, nil
	}
	var keep []drivers.Spec
	for _, s := range stored.Resources {
		if isRelease(s) {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return d, nil
	}
	out := *d
	out.Resources = append(slices.Clip(d.Resources), keep...)
	doc, err := out.MarshalJSON()
	if err != nil {
		return nil, err
	}
	return declaration.ParseJSON("the declaration rendered for "+d.Node, doc)
}
