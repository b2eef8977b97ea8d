package declaration_test

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

func seeds(f *testing.F, patterns ...string) {
	for _, p := range patterns {
		files, err := filepath.Glob(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
}

// check holds what every parse must: an error that is Errors of placed
// problems matching ErrInvalid, or a declaration whose wire form reads back
// to the same declaration with the same digest.
func check(t *testing.T, d *declaration.Declaration, err error) {
	if err != nil {
		if d != nil {
			t.Fatalf("got a declaration beside %v", err)
		}
		var es declaration.Errors
		if !errors.As(err, &es) || !errors.Is(err, declaration.ErrInvalid) || len(es) == 0 {
			t.Fatalf("got %T %v, want Errors matching ErrInvalid", err, err)
		}
		for _, e := range es {
			if e.Line < 1 || e.Column < 1 {
				t.Fatalf("got %q, want a line and column", e)
			}
		}
		return
	}
	wire, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	back, err := declaration.ParseJSON("wire.json", wire)
	if err != nil {
		t.Fatalf("the wire form %s does not parse: %v", wire, err)
	}
	if !same(d, back) {
		t.Fatalf("got %+v after a round trip of %s, want %+v", back, wire, d)
	}
	if d.Digest() != back.Digest() {
		t.Fatalf("got digest %s after a round trip, want %s", back.Digest(), d.Digest())
	}
	d.Expanded()
	d.RefuseInstallation(testInstallation) // must not panic, whatever the declaration
}

func FuzzParseYAML(f *testing.F) {
	seeds(f, "../examples/*.yaml", "testdata/bad/*.yaml")
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := declaration.ParseYAML("fuzz.yaml", data)
		check(t, d, err)
	})
}

func FuzzParseJSON(f *testing.F) {
	seeds(f, "../examples/*.json", "testdata/bad/*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := declaration.ParseJSON("fuzz.json", data)
		check(t, d, err)
	})
}

// FuzzAdmission checks admission against an installation the fuzzer also
// chooses: whatever the declaration and the configured paths, the check
// never panics; a refusal is a placed ErrInvalid naming the part of the
// installation; and a declaration it admits writes nothing at or under a
// path of the installation, names neither its unit nor its package, and
// puts nothing in its versions directory but a release archive.
func FuzzAdmission(f *testing.F) {
	for _, doc := range []string{
		"mesh: m\nnode: n\nrevision: 1\nresources:\n  - file: {path: /var/lib/mesh-host/journal.db, content: x}\n",
		"mesh: m\nnode: n\nrevision: 1\nresources:\n  - directory: {path: /var/lib}\n",
		"mesh: m\nnode: n\nrevision: 1\nresources:\n  - archive: {path: /var, source: \"file:///srv/a.tar\", digest: \"sha256:" + strings.Repeat("0", 64) + "\", format: tar}\n",
		"mesh: m\nnode: n\nrevision: 1\nresources:\n  - archive: {path: \"/opt/mesh-host/versions/${version}\", source: \"https://x/a.tar\", digest: \"sha256:" + strings.Repeat("0", 64) + "\", format: tar}\n",
		"mesh: m\nnode: n\nrevision: 1\nresources:\n  - unit: {name: mesh-host.service, content: x}\n",
		"mesh: m\nnode: n\nrevision: 1\nresources:\n  - package: {name: mesh-host, state: absent}\n",
	} {
		f.Add([]byte(doc), "mesh-host.service", "mesh-host", "/var/lib/mesh-host", "/opt/mesh-host/versions")
	}
	f.Fuzz(func(t *testing.T, doc []byte, unit, pkg, state, versions string) {
		inst := declaration.Installation{Unit: unit, Package: pkg, Paths: []string{state}, Versions: versions}
		d, err := declaration.ParseYAML("fuzz.yaml", doc)
		if err != nil {
			return
		}
		if err := d.RefuseInstallation(inst); err != nil {
			var e *declaration.Error
			if !errors.As(err, &e) || !errors.Is(err, declaration.ErrInvalid) ||
				!errors.Is(err, declaration.ErrOwnInstallation) && !errors.Is(err, declaration.ErrOwnUnit) {
				t.Fatalf("refusal %T %v: want a placed Error matching ErrInvalid and ErrOwnInstallation or ErrOwnUnit", err, err)
			}
			if !strings.Contains(e.Field, "resources[") {
				t.Fatalf("refusal %v does not name the resource", err)
			}
			return
		}
		// An independent oracle, for installations a host could have.
		clean := func(p string) bool { return p != "" && p[0] == '/' && path.Clean(p) == p && p != "/" }
		under := func(p, q string) bool { return p == q || strings.HasPrefix(p, q+"/") }
		for _, s := range d.Resources {
			var p string
			archive := false
			switch s := s.(type) {
			case *drivers.FileSpec:
				p = s.Path
			case *drivers.DirectorySpec:
				p = s.Path
			case *drivers.ArchiveSpec:
				p, archive = s.Path, true
			case *drivers.UnitSpec:
				if unit != "" && s.Name == unit {
					t.Fatalf("admitted a unit named %q, the host's own", unit)
				}
			case *drivers.PackageSpec:
				if pkg != "" && s.Name == pkg {
					t.Fatalf("admitted the host's own package %q", pkg)
				}
			}
			if p == "" {
				continue
			}
			if clean(state) && (under(p, state) || archive && under(state, p)) {
				t.Fatalf("admitted %s %s over the host's own %s", s.Kind(), p, state)
			}
			if clean(versions) && under(p, versions) && !(archive && p == versions+"/${version}") {
				t.Fatalf("admitted %s %s in the versions directory %s", s.Kind(), p, versions)
			}
		}
	})
}
