// Package declarationtest builds declarations at the limits of package
// declaration, for the tests of every door a declaration comes through:
// the parser, meshctl declare, a push to the host, mesh-host apply. Each
// is exactly declaration.MaxBytes in its JSON form, or the size asked for.
// This package is for tests only.
package declarationtest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

// Maximal is a declaration at every limit at once: MaxResources resources;
// a file whose path is MaxPathBytes long in elements of
// MaxPathElementBytes, whose content is MaxContentBytes and whose owner and
// group are MaxNameBytes; a unit and a package whose names are MaxNameBytes;
// and, to fill its JSON form to MaxBytes, files' content.
func Maximal(mesh, node string, revision uint64) *declaration.Declaration {
	return MaximalOf(mesh, node, revision, declaration.MaxBytes)
}

// MaximalOf is Maximal filled to size bytes rather than MaxBytes: the
// largest declaration of that size, in resources and in every value. A
// push (linkproto.MaxDeclarationSize) is smaller than MaxBytes; when size
// cannot hold MaxResources, it holds as many as fit.
func MaximalOf(mesh, node string, revision uint64, size int) *declaration.Declaration {
	name := strings.Repeat("n", declaration.MaxNameBytes)
	d := &declaration.Declaration{Mesh: mesh, Node: node, Revision: revision, Resources: []drivers.Spec{
		&drivers.FileSpec{Path: LongPath("/srv", declaration.MaxPathBytes), Content: strings.Repeat("c", declaration.MaxContentBytes), Owner: name, Group: name},
		&drivers.UnitSpec{Name: name[:declaration.MaxNameBytes-len(".service")] + ".service", Content: "[Service]\nExecStart=/bin/true\n"},
		&drivers.PackageSpec{Name: name, State: drivers.Present},
	}}
	dir := func(i int) drivers.Spec { return &drivers.DirectorySpec{Path: fmt.Sprintf("/d/%06d", i)} }
	fillFile := func(i int) *drivers.FileSpec { return &drivers.FileSpec{Path: fmt.Sprintf("/fill%04d", i)} }
	// Every directory takes as many bytes, and so does every fill file
	// around its content: the count of each is arithmetic.
	base := sizeOf(d)
	dirBytes := sizeOf(&declaration.Declaration{Mesh: mesh, Node: node, Revision: revision, Resources: append(slices.Clone(d.Resources), dir(0))}) - base
	fileBytes := sizeOf(&declaration.Declaration{Mesh: mesh, Node: node, Revision: revision, Resources: append(slices.Clone(d.Resources), fillFile(0))}) - base
	fills := 1
	dirs := declaration.MaxResources - len(d.Resources) - fills
	for content := size - base - dirs*dirBytes - fills*fileBytes; content > fills*declaration.MaxContentBytes; {
		fills++
		dirs--
		content = size - base - dirs*dirBytes - fills*fileBytes
	}
	if free := size - base - fills*fileBytes; dirs*dirBytes > free {
		dirs = free / dirBytes
	}
	for i := range dirs {
		d.Resources = append(d.Resources, dir(i))
	}
	content := size - base - dirs*dirBytes - fills*fileBytes
	for i := range fills {
		f := fillFile(i)
		n := min(content, declaration.MaxContentBytes)
		f.Content, content = strings.Repeat("f", n), content-n
		d.Resources = append(d.Resources, f)
	}
	if got := sizeOf(d); got != size {
		panic(fmt.Sprintf("declarationtest: filled to %d bytes, not %d", got, size))
	}
	return d
}

// MostExpanded is the declaration whose resource IDs are longest for its
// size: archives whose paths are ${version} over and over, each expanding
// to MaxPathBytes, as many as MaxBytes holds (digests differ, so their
// paths do), and a last file's content to fill its JSON form to MaxBytes.
// Its list of resource IDs, which the journal stores apart, is the
// largest a declaration makes.
func MostExpanded(mesh, node string, revision uint64) *declaration.Declaration {
	const version = "${version}"
	const expanded = len("/") + 64 // "/${version}" with a digest's hex
	var path string
	for n := 1; n*expanded <= declaration.MaxPathBytes; n++ {
		path += "/" + version
	}
	archive := func(i int) drivers.Spec {
		return &drivers.ArchiveSpec{Path: path, Source: "file:///a.tar", Digest: fmt.Sprintf("sha256:%064x", i), Format: drivers.FormatTar}
	}
	d := &declaration.Declaration{Mesh: mesh, Node: node, Revision: revision, Resources: []drivers.Spec{archive(0)}}
	// Every archive takes as many bytes, and one more for a comma.
	one := sizeOf(d)
	d.Resources = nil
	base := sizeOf(d)
	each := one - base + 1
	for i := range (declaration.MaxBytes - 1024 - base) / each {
		d.Resources = append(d.Resources, archive(i))
	}
	return fill(d, declaration.MaxBytes)
}

// LongPath is a clean path under dir of exactly n bytes, in elements of
// MaxPathElementBytes (the last one shorter).
func LongPath(dir string, n int) string {
	var b strings.Builder
	b.WriteString(dir)
	for b.Len() < n {
		elem := min(declaration.MaxPathElementBytes, n-b.Len()-1)
		if elem < 1 { // "/" alone would end the path with a slash
			return LongPath(dir+"x", n)
		}
		b.WriteString("/" + strings.Repeat("p", elem))
	}
	return b.String()
}

// fill adds a file whose content brings d's JSON form to size bytes.
func fill(d *declaration.Declaration, size int) *declaration.Declaration {
	f := &drivers.FileSpec{Path: "/fill"}
	d.Resources = append(d.Resources, f)
	f.Content = strings.Repeat("f", size-sizeOf(d))
	return d
}

func sizeOf(d *declaration.Declaration) int {
	b, err := d.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return len(b)
}

// Over is a declaration over one limit.
type Over struct {
	// Limit names the limit, as in the refusal.
	Limit string
	// Document is the declaration in JSON, which is YAML too.
	Document []byte
}

// OverLimits are declarations one byte or one resource over each limit,
// every other value well within its own.
func OverLimits(mesh, node string, revision uint64) []Over {
	doc := func(resources ...drivers.Spec) []byte {
		b, err := (&declaration.Declaration{Mesh: mesh, Node: node, Revision: revision, Resources: resources}).MarshalJSON()
		if err != nil {
			panic(err)
		}
		return b
	}
	max := Maximal(mesh, node, revision)
	fill := max.Resources[len(max.Resources)-1].(*drivers.FileSpec)
	fill.Content += "f"
	bigger, _ := max.MarshalJSON()
	var many []drivers.Spec
	for i := range declaration.MaxResources + 1 {
		many = append(many, &drivers.PackageSpec{Name: fmt.Sprintf("p%d", i), State: drivers.Present})
	}
	name := strings.Repeat("n", declaration.MaxNameBytes+1)
	return []Over{
		{fmt.Sprintf("the limit for a declaration: %d bytes", declaration.MaxBytes), bigger},
		{fmt.Sprintf("the limit of resources in a declaration: %d", declaration.MaxResources), doc(many...)},
		{"the limit for a path: 4086 bytes", doc(&drivers.FileSpec{Path: LongPath("/srv", declaration.MaxPathBytes+1)})},
		{"the limit for an element of a path: 255 bytes", doc(&drivers.DirectorySpec{Path: "/srv/" + strings.Repeat("e", declaration.MaxPathElementBytes+1)})},
		{"the limit for content: 524288 bytes", doc(&drivers.FileSpec{Path: "/etc/motd", Content: strings.Repeat("c", declaration.MaxContentBytes+1)})},
		{"the limit for a name: 255 bytes", doc(&drivers.PackageSpec{Name: name, State: drivers.Present})},
	}
}
