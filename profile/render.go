package profile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/labels"
)

// ErrNoProfile is returned for a node no profile selects. Rendering it an
// empty declaration would have the node let go of everything it manages
// because of a label typo; a node no profile selects is left as it is.
var ErrNoProfile = errors.New("no profile selects the node")

// Node is what rendering knows of a node.
type Node struct {
	Mesh   string
	Name   string
	Labels labels.Set
	// Facts are the node's facts as it last reported them (see Facts);
	// nil when it has not reported any.
	Facts map[string]string
}

// factNames are the facts ${fact.KEY} can name.
var factNames = []string{"hostname", "os_id", "os_version", "arch", "kernel", "cores", "memory_mb", "address", "addresses", "boot_id", "version"}

// Facts is the ${fact.KEY} view of a node's reported facts: address is its
// first address, addresses all of them joined by commas. A fact the node
// did not report is absent.
func Facts(f event.HostFactsPayload) map[string]string {
	out := map[string]string{}
	set := func(k, v string) {
		if v != "" {
			out[k] = v
		}
	}
	set("hostname", f.Hostname)
	set("os_id", f.OSID)
	set("os_version", f.OSVersion)
	set("arch", f.Arch)
	set("kernel", f.Kernel)
	if f.Cores > 0 {
		set("cores", strconv.Itoa(f.Cores))
	}
	if f.MemoryMB > 0 {
		set("memory_mb", strconv.FormatUint(f.MemoryMB, 10))
	}
	if len(f.Addresses) > 0 {
		set("address", f.Addresses[0])
		set("addresses", strings.Join(f.Addresses, ","))
	}
	set("boot_id", f.BootID)
	set("version", f.Version)
	return out
}

// UsesFacts says the profile names a fact of the node it is rendered
// for, so rendering needs the node's facts.
func (p *Parsed) UsesFacts() bool { return p.usesFacts }

// Selects reports whether p's selector matches a node with these labels.
func (p *Parsed) Selects(l labels.Set) bool { return p.selector.Matches(l) }

// matching returns the profiles that select a node with labels l, in the
// order rendering merges them: by priority, lower first, then by name.
// A lower priority comes first in the document, so a base profile's
// packages are installed before a role's files that need them.
func matching(profiles []*Parsed, l labels.Set) []*Parsed {
	var out []*Parsed
	for _, p := range profiles {
		if p.Selects(l) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *Parsed) int {
		if a.Priority != b.Priority {
			return a.Priority - b.Priority
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Render composes node's declaration at revision from the profiles that
// select it: their resources in priority order, variables filled in. A
// resource two profiles declare alike is kept once, where it first
// appears; declared differently, it is refused, naming both profiles, the
// resource and the field. The result is checked by the declaration's
// rules as a whole. It returns, beside the declaration, the names of the
// profiles it was made of.
func Render(node Node, profiles []*Parsed, revision uint64) (*declaration.Declaration, []string, error) {
	selected := matching(profiles, node.Labels)
	if len(selected) == 0 {
		return nil, nil, ErrNoProfile
	}
	type origin struct {
		profile *Parsed
		at      *yaml.Node
		json    []byte
	}
	var (
		merged []drivers.Spec
		from   = map[string]origin{}
		names  []string
		list   Errors
	)
	for _, p := range selected {
		names = append(names, p.Name)
		d, items, err := p.render(node, revision)
		if err != nil {
			var es Errors
			if errors.As(err, &es) {
				list = append(list, es...)
				continue
			}
			return nil, names, err
		}
		for i, s := range d.Resources {
			id := drivers.ID(s)
			js, err := json.Marshal(s)
			if err != nil {
				return nil, names, err
			}
			prev, seen := from[id]
			if !seen {
				from[id] = origin{p, items[i], js}
				merged = append(merged, s)
				continue
			}
			if bytes.Equal(prev.json, js) {
				continue
			}
			list = append(list, &Error{File: p.File, Line: items[i].Line, Column: items[i].Column,
				Field: fmt.Sprintf("resources[%d].%s.%s", i, s.Kind(), firstDifference(prev.json, js)),
				Msg: fmt.Sprintf("profiles %s (%s:%d) and %s both declare %s, differently",
					prev.profile.Name, prev.profile.File, prev.at.Line, p.Name, id)})
		}
	}
	if len(list) > 0 {
		return nil, names, list
	}
	d := &declaration.Declaration{Mesh: node.Mesh, Node: node.Name, Revision: revision, Resources: merged}
	doc, err := d.MarshalJSON()
	if err != nil {
		return nil, names, err
	}
	// The merged document as a whole: its size, its resource count, the
	// rules that relate one resource to another.
	out, err := declaration.ParseJSON("the declaration rendered for "+node.Name, doc)
	return out, names, err
}

// render fills in p's variables for node and checks its resources as a
// declaration's, each error placed in p's file. It returns the parsed
// resources and the YAML item each came from.
func (p *Parsed) render(node Node, revision uint64) (*declaration.Declaration, []*yaml.Node, error) {
	resources := copyNode(p.resources)
	var list Errors
	walkScalars(resources, func(s *yaml.Node) {
		refs := references(s.Value)
		if len(refs) == 0 {
			return
		}
		var b strings.Builder
		last := 0
		for _, ref := range refs {
			b.WriteString(s.Value[last:ref.offset])
			last = ref.end
			v, msg := p.value(node, ref.name)
			if msg != "" {
				line, col := refPosition(p.Source, s, ref.offset)
				list = append(list, &Error{File: p.File, Line: line, Column: col, Msg: msg})
				continue
			}
			b.WriteString(v)
		}
		b.WriteString(s.Value[last:])
		s.Value = b.String()
	})
	if len(list) > 0 {
		return nil, nil, list
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: 1, Column: 1, Content: []*yaml.Node{
		str("mesh"), str(node.Mesh),
		str("node"), str(node.Name),
		str("revision"), {Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatUint(revision, 10)},
		str("resources"), resources,
	}}
	d, err := declaration.ParseNode(p.File, doc)
	if err != nil {
		return nil, nil, err
	}
	return d, resources.Content, nil
}

// value is what ${name} stands for on node, or why it stands for nothing.
func (p *Parsed) value(node Node, name string) (string, string) {
	if name == "version" {
		// The declaration's own variable, filled in by the host.
		return "${version}", ""
	}
	if ns, key, ok := strings.Cut(name, "."); ok {
		switch ns {
		case "label":
			if v, ok := node.Labels[key]; ok {
				return v, ""
			}
			return "", fmt.Sprintf("${%s}: node %s has no label %s", name, node.Name, key)
		case "fact":
			if v, ok := node.Facts[key]; ok {
				return v, ""
			}
			if node.Facts == nil {
				return "", fmt.Sprintf("${%s}: node %s has not reported its facts yet", name, node.Name)
			}
			return "", fmt.Sprintf("${%s}: node %s did not report %s", name, node.Name, key)
		}
	}
	switch name {
	case "node":
		return node.Name, ""
	case "mesh":
		return node.Mesh, ""
	}
	// A node's label of the same name overrides the profile's value.
	if v, ok := node.Labels[name]; ok {
		return v, ""
	}
	if v, ok := p.vars[name]; ok {
		return v, ""
	}
	return "", p.refProblem(name)
}

func str(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

// copyNode copies a tree deeply, so rendering one node leaves the profile
// as it was for the next.
func copyNode(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = copyNode(k)
	}
	return &c
}

// firstDifference names the first top-level field, in sorted order, whose
// value differs between two specs' JSON.
func firstDifference(a, b []byte) string {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		return "?"
	}
	keys := make([]string, 0, len(ma)+len(mb))
	for k := range ma {
		keys = append(keys, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !bytes.Equal(ma[k], mb[k]) {
			return k
		}
	}
	return "?"
}
