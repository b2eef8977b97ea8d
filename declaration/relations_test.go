package declaration_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

// TestRelations: relations parse on every kind, survive the wire form,
// and name an archive written with ${version} by its expanded ID once
// expanded, without changing the declaration they were expanded from.
func TestRelations(t *testing.T) {
	const doc = `mesh: home
node: web-1
revision: 1
resources:
  - directory: {path: /srv}
  - archive:
      path: /srv/${version}
      source: file:///a.tar
      digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
      format: tar
  - package: {name: nginx}
  - file: {path: /etc/nginx.conf, content: "x", requires: [package:nginx], notify: [unit:nginx.service]}
  - unit:
      name: nginx.service
      enabled: true
      active: true
      refresh: reload
      requires: [package:nginx]
      subscribe: ["archive:/srv/${version}"]
  - exec:
      name: migrate
      command: [/srv/bin/migrate, --once]
      creates: /srv/migrated
      requires: [directory:/srv]
      timeout: 30s
      env: [A=1]
      success_codes: [0, 2]
`
	d, err := declaration.ParseYAML("web.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	wire, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := declaration.ParseJSON("wire", wire)
	if err != nil {
		t.Fatalf("the wire form does not parse: %v\n%s", err, wire)
	}
	if back.Digest() != d.Digest() {
		t.Errorf("the wire form says something else:\n%s", wire)
	}
	unit := d.Resources[4].(*drivers.UnitSpec)
	if unit.Refresh != drivers.RefreshReload || !slices.Equal(unit.Requires, []string{"package:nginx"}) {
		t.Errorf("got unit %+v", unit)
	}
	exec := d.Resources[5].(*drivers.ExecSpec)
	if !slices.Equal(exec.SuccessCodes, []int{0, 2}) || exec.Timeout != "30s" || !slices.Equal(exec.Command, []string{"/srv/bin/migrate", "--once"}) {
		t.Errorf("got exec %+v", exec)
	}

	expanded := d.Expanded()
	want := "archive:/srv/" + strings.Repeat("1", 64)
	if got := expanded[4].(*drivers.UnitSpec).Subscribe; !slices.Equal(got, []string{want}) {
		t.Errorf("expanded subscribe: got %q, want %q", got, want)
	}
	if got := unit.Subscribe; !slices.Equal(got, []string{"archive:/srv/${version}"}) {
		t.Errorf("the declaration's own subscribe changed: %q", got)
	}
	if drivers.ID(expanded[1]) != want {
		t.Errorf("got archive ID %s, want %s", drivers.ID(expanded[1]), want)
	}

	stored, err := declaration.DecodeStored(wire)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Digest() != d.Digest() {
		t.Errorf("a stored declaration with relations and an exec decodes to another")
	}
}

// TestRelationsBounded: a declaration whose relations name more IDs than
// MaxRelations is refused by the limit, at the first one over it.
func TestRelationsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("mesh: m\nnode: n\nrevision: 1\nresources:\n  - file: {path: /a, content: \"\"}\n")
	refs := strings.TrimSuffix(strings.Repeat("file:/a, ", 1024), ", ")
	units := declaration.MaxRelations/1024 + 1
	for i := range units {
		fmt.Fprintf(&b, "  - unit: {name: u%d.service, requires: [%s]}\n", i, refs)
	}
	_, err := declaration.ParseYAML("many.yaml", []byte(b.String()))
	if !errors.Is(err, declaration.ErrLimit) || !strings.Contains(err.Error(), "one relation more than the limit of relations in a declaration: 250000") {
		t.Fatalf("got %v, want the relations limit", err)
	}
	want := fmt.Sprintf("resources[%d].unit.requires[%d]", declaration.MaxRelations/1024+1, declaration.MaxRelations%1024)
	if !strings.Contains(err.Error(), want) {
		t.Errorf("got %v, want it placed at %s", err, want)
	}
}

// TestEveryKindRoundTrips: a declaration of every kind, written as the
// host journals it, is read back by DecodeStored and Expanded as it was:
// a kind the stored form forgot would leave a host unable to use its own
// journal.
func TestEveryKindRoundTrips(t *testing.T) {
	const doc = `mesh: m
node: n
revision: 1
resources:
  - file: {path: /etc/a, content: "x", owner: web, requires: [user:web]}
  - directory: {path: /srv}
  - archive: {path: /srv/a, source: "file:///a.tar", digest: "sha256:1111111111111111111111111111111111111111111111111111111111111111", format: tar}
  - package: {name: nginx}
  - unit: {name: a.service, active: true}
  - exec: {name: e, command: [/bin/true], creates: /srv/done, success_codes: [0, 1]}
  - user: {name: web, uid: 1500, groups: [adm], system: true, password: {secret: web-pw}}
  - group: {name: adm, gid: 4}
`
	d, err := declaration.ParseYAML("all.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[drivers.Kind]bool{}
	for _, s := range d.Resources {
		kinds[s.Kind()] = true
	}
	if len(kinds) != len(declaration.Kinds()) {
		t.Fatalf("the test declares %d kinds, the parser knows %d: declare one of each", len(kinds), len(declaration.Kinds()))
	}
	wire, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	stored, err := declaration.DecodeStored(wire)
	if err != nil {
		t.Fatalf("DecodeStored: %v", err)
	}
	if stored.Digest() != d.Digest() {
		t.Errorf("the stored declaration reads back as another")
	}
	for i, s := range d.Expanded() {
		if drivers.SpecDigest(s) != drivers.SpecDigest(d.Resources[i]) {
			t.Errorf("resources[%d] expands to another spec", i)
		}
	}
}
