package declaration

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/drivers"
)

// The relations a resource may state (drivers.Relations), as a
// declaration spells them.
const (
	relRequires  = "requires"
	relNotify    = "notify"
	relSubscribe = "subscribe"
)

// refreshable are the kinds a refresh reaches: a unit is restarted or
// reloaded, an exec run. Their drivers are drivers.Refreshers.
var refreshable = []drivers.Kind{drivers.KindUnit, drivers.KindExec}

// relationRef is one ID a relation names, and where it was written.
type relationRef struct {
	spec     drivers.Spec // the resource that states it
	from     int          // its index, found by checkRelations
	relation string
	to       string
	node     *yaml.Node
	path     string
}

// noteRelations keeps the IDs spec's relations name, with their
// positions, for checkRelations once every resource is read. A list that
// did not decode whole is not kept: its problems are reported already.
func (d *decoder) noteRelations(spec drivers.Spec, fs map[string]field, path string) {
	rel := drivers.RelationsOf(spec)
	if rel == nil {
		return
	}
	for _, r := range []struct {
		name string
		ids  []string
	}{{relRequires, rel.Requires}, {relNotify, rel.Notify}, {relSubscribe, rel.Subscribe}} {
		f, ok := fs[r.name]
		if !ok || len(f.value.Content) != len(r.ids) {
			continue
		}
		for i, id := range r.ids {
			if len(d.refs) == MaxRelations {
				e := f.value.Content[i]
				d.errs = append(d.errs, &Error{File: d.file, Line: e.Line, Column: e.Column, Field: fmt.Sprintf("%s[%d]", join(path, r.name), i),
					sentinel: ErrLimit, Msg: fmt.Sprintf("one relation more than %s: %d", limitRelations, MaxRelations)})
			}
			if len(d.refs) >= MaxRelations {
				return
			}
			d.refs = append(d.refs, relationRef{spec: spec, relation: r.name, to: id, node: f.value.Content[i],
				path: fmt.Sprintf("%s[%d]", join(path, r.name), i)})
		}
	}
}

// checkRelations refuses relations that name no resource of the
// declaration, name an archive that two resources share, name the
// resource itself, refresh what cannot be refreshed, or make a cycle
// (with the order a path's declared parent directory imposes, which the
// host keeps whatever the relations say). It runs only when the
// resources decoded without a problem: a resource that did not decode is
// not there to be named.
func (d *decoder) checkRelations(decl *Declaration) {
	if len(d.refs) == 0 || len(d.errs) > 0 {
		return
	}
	byID := indexByID(decl.Resources)
	kindOf := func(i int) drivers.Kind { return decl.Resources[i].Kind() }
	indexOf := make(map[drivers.Spec]int, len(decl.Resources))
	for i, s := range decl.Resources {
		indexOf[s] = i
	}
	var edges []edge
	for _, r := range d.refs {
		r.from = indexOf[r.spec]
		to, ok := byID[r.to]
		switch {
		case !ok:
			d.fail(r.node, r.path, "%q is not declared here: a relation names a resource of the same declaration by its ID (kind:key)", r.to)
			continue
		case to < 0:
			d.fail(r.node, r.path, "%q is the path of more than one archive: name one by its path with %s expanded", r.to, version)
			continue
		case to == r.from:
			d.fail(r.node, r.path, "a resource cannot name itself")
			continue
		}
		from := r.from
		switch r.relation {
		case relRequires:
			edges = append(edges, edge{to, from, r})
		case relNotify:
			if !slices.Contains(refreshable, kindOf(to)) {
				d.fail(r.node, r.path, "%q cannot be refreshed: only a unit (restarted or reloaded) or an exec (run) can", r.to)
				continue
			}
			edges = append(edges, edge{from, to, r})
		case relSubscribe:
			if !slices.Contains(refreshable, kindOf(from)) {
				d.fail(r.node, r.path, "only a unit or an exec can subscribe: a %s is not refreshed (use requires to order it)", kindOf(from))
				continue
			}
			edges = append(edges, edge{to, from, r})
		}
	}
	if len(d.errs) > 0 {
		return
	}
	edges = append(edges, parentEdges(decl.Resources)...)
	if cycle := findCycle(len(decl.Resources), edges); cycle != nil {
		at := cycle[slices.IndexFunc(cycle, func(e edge) bool { return e.ref.node != nil })].ref
		d.fail(at.node, at.path, "the relations make a cycle: %s", describeCycle(decl.Resources, cycle))
	}
}

// indexByID maps each resource's ID, as written and (for an archive whose
// path holds ${version}) expanded, to its index; -1 for an ID two
// resources share (archives whose paths differ only once expanded).
func indexByID(specs []drivers.Spec) map[string]int {
	byID := make(map[string]int, len(specs))
	add := func(id string, i int) {
		if j, dup := byID[id]; dup && j != i {
			byID[id] = -1
			return
		}
		byID[id] = i
	}
	for i, s := range specs {
		add(drivers.ID(s), i)
		if a, ok := s.(*drivers.ArchiveSpec); ok && strings.Contains(a.Path, version) {
			add(drivers.ID(expand(s)), i)
		}
	}
	return byID
}

// edge says resource before comes before resource after: by the relation
// ref, or (ref.node nil) because before is after's declared parent
// directory.
type edge struct {
	before, after int
	ref           relationRef
}

// parentEdges are the orders the paths impose: a directory or archive
// declared at a path's parent comes before what lies in it.
func parentEdges(specs []drivers.Spec) []edge {
	dirs := make(map[string]int)
	for i, s := range specs {
		switch s.(type) {
		case *drivers.DirectorySpec, *drivers.ArchiveSpec:
			dirs[expand(s).Key()] = i
		}
	}
	var out []edge
	for i, s := range specs {
		switch s.(type) {
		case *drivers.FileSpec, *drivers.DirectorySpec, *drivers.ArchiveSpec:
			if p, ok := dirs[path.Dir(expand(s).Key())]; ok && p != i {
				out = append(out, edge{before: p, after: i})
			}
		}
	}
	return out
}

// findCycle returns the edges of a cycle among n resources, or nil when
// there is none: a depth-first search, iterative so that a long chain of
// directories does not grow the stack.
func findCycle(n int, edges []edge) []edge {
	out := make([][]int, n)
	for i, e := range edges {
		out[e.before] = append(out[e.before], i)
	}
	const (
		unseen = iota
		onPath
		done
	)
	state := make([]byte, n)
	type frame struct{ node, next int }
	for start := range n {
		if state[start] != unseen {
			continue
		}
		var stack []frame
		var via []int // via[k] is the edge that led to stack[k+1]
		stack = append(stack, frame{start, 0})
		state[start] = onPath
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			if top.next == len(out[top.node]) {
				state[top.node] = done
				stack = stack[:len(stack)-1]
				if len(via) > 0 {
					via = via[:len(via)-1]
				}
				continue
			}
			ei := out[top.node][top.next]
			top.next++
			next := edges[ei].after
			switch state[next] {
			case onPath:
				k := slices.IndexFunc(stack, func(f frame) bool { return f.node == next })
				cycle := make([]edge, 0, len(stack)-k)
				for _, e := range via[k:] {
					cycle = append(cycle, edges[e])
				}
				return append(cycle, edges[ei])
			case unseen:
				state[next] = onPath
				stack = append(stack, frame{next, 0})
				via = append(via, ei)
			}
		}
	}
	return nil
}

// describeCycle says a cycle in words, each resource waiting for the
// next: "unit:a.service requires unit:b.service, which subscribes to
// unit:a.service".
func describeCycle(specs []drivers.Spec, cycle []edge) string {
	var b strings.Builder
	for i := len(cycle) - 1; i >= 0; i-- {
		e := cycle[i]
		waits, on := drivers.ID(specs[e.after]), drivers.ID(specs[e.before])
		verb := "subscribes to"
		switch {
		case e.ref.node == nil:
			verb = "lies in"
		case e.ref.relation == relRequires:
			verb = "requires"
		case e.ref.relation == relNotify:
			verb = "is notified by"
		}
		if i == len(cycle)-1 {
			b.WriteString(waits)
		} else {
			b.WriteString(", which")
		}
		fmt.Fprintf(&b, " %s %s", verb, on)
	}
	return b.String()
}

// expandRelations rewrites, in specs (copies, expanded), a relation that
// names an archive by its path as written, ${version} and all, to its
// expanded ID: what the reconciler knows it by. specs are decl's
// resources expanded, in order.
func (d *Declaration) expandRelations(specs []drivers.Spec) {
	var renamed map[string]string
	for i, s := range d.Resources {
		if a, ok := s.(*drivers.ArchiveSpec); ok && strings.Contains(a.Path, version) {
			if renamed == nil {
				renamed = make(map[string]string)
			}
			written := drivers.ID(s)
			if _, dup := renamed[written]; dup {
				renamed[written] = "" // ambiguous: admission refuses a relation naming it
				continue
			}
			renamed[written] = drivers.ID(specs[i])
		}
	}
	if renamed == nil {
		return
	}
	for _, s := range specs {
		rel := drivers.RelationsOf(s)
		if rel == nil {
			continue
		}
		for _, ids := range []*[]string{&rel.Requires, &rel.Notify, &rel.Subscribe} {
			for i, id := range *ids {
				if to := renamed[id]; to != "" {
					(*ids)[i] = to
				}
			}
		}
	}
}
