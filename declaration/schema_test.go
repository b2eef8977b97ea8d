package declaration_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/mesh-host/mesh-host/declaration"
)

const schemaFile = "../schema/declaration.schema.json"

// TestSchemaUpToDate: the checked-in schema is what Schema generates;
// go test ./declaration -update rewrites it.
func TestSchemaUpToDate(t *testing.T) {
	got, err := declaration.Schema()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(schemaFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what declaration.Schema generates: run go test ./declaration -update", schemaFile)
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := declaration.Schema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("declaration.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("declaration.schema.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return s
}

// instance reads YAML into the generic values a JSON decoder would make.
func instance(t *testing.T, src string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(src), &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return inst
}

func TestSchemaAcceptsExamples(t *testing.T) {
	s := compileSchema(t)
	for _, f := range examples(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(instance(t, string(b))); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	j, err := os.ReadFile("../examples/web.json")
	if err != nil {
		t.Fatal(err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(inst); err != nil {
		t.Errorf("web.json: %v", err)
	}
}

// TestSchemaRefuses: the schema states the union, the required fields, the
// patterns and the enums, so it refuses what the parser refuses for them.
func TestSchemaRefuses(t *testing.T) {
	s := compileSchema(t)
	digest := "sha256:" + strings.Repeat("a", 64)
	good := map[string]string{
		"file":      `{path: /etc/motd, content: "", mode: "0644", owner: root, group: adm}`,
		"directory": `{path: /srv, mode: "755"}`,
		"archive":   `{path: "/opt/${version}", source: "https://a.example/x", digest: "` + digest + `", format: tar.zst}`,
		"package":   `{name: libstdc++6, state: absent}`,
		"unit":      `{name: app.service, content: x, enabled: true, active: false}`,
	}
	for kind, spec := range good {
		src := "mesh: m\nnode: n\nrevision: 1\nresources:\n- " + kind + ": " + spec + "\n"
		if err := s.Validate(instance(t, src)); err != nil {
			t.Errorf("got %v for %s, want it valid", err, src)
		}
		// Every good resource is good for the parser too.
		if _, err := declaration.ParseYAML("good.yaml", []byte(src)); err != nil {
			t.Errorf("got %v for %s, want it valid", err, src)
		}
	}
	for _, tc := range []struct{ name, resources string }{
		{"two keys in an entry", `[{file: {path: /a, content: x}, package: {name: nginx}}]`},
		{"no key in an entry", `[{}]`},
		{"unknown kind", `[{service: {name: a.service}}]`},
		{"unknown field", `[{file: {path: /a, content: x, perms: "0644"}}]`},
		{"missing content", `[{file: {path: /a}}]`},
		{"mode as a number", `[{file: {path: /a, content: x, mode: 644}}]`},
		{"mode not octal", `[{file: {path: /a, content: x, mode: "0999"}}]`},
		{"relative path", `[{directory: {path: srv}}]`},
		{"unclean path", `[{directory: {path: /srv/}}]`},
		{"path with ..", `[{directory: {path: /srv/../etc}}]`},
		{"root path", `[{directory: {path: /}}]`},
		{"empty digest", `[{archive: {path: /a, source: "file:///a", digest: "", format: tar}}]`},
		{"upper-case digest", `[{archive: {path: /a, source: "file:///a", digest: "SHA256:` + strings.Repeat("A", 64) + `", format: tar}}]`},
		{"unknown format", `[{archive: {path: /a, source: "file:///a", digest: "` + digest + `", format: rar}}]`},
		{"ftp source", `[{archive: {path: /a, source: "ftp://a/b", digest: "` + digest + `", format: tar}}]`},
		{"package name", `[{package: {name: Nginx}}]`},
		{"package state", `[{package: {name: nginx, state: installed}}]`},
		{"unit suffix", `[{unit: {name: app, content: x}}]`},
		{"unit path", `[{unit: {name: /etc/systemd/system/app.service, content: x}}]`},
		{"unit empty content", `[{unit: {name: app.service, content: ""}}]`},
		{"bool as a string", `[{unit: {name: app.service, content: x, enabled: "yes"}}]`},
		{"owner with a colon", `[{file: {path: /a, content: x, owner: "root:root"}}]`},
	} {
		src := "mesh: m\nnode: n\nrevision: 1\nresources: " + tc.resources + "\n"
		if err := s.Validate(instance(t, src)); err == nil {
			t.Errorf("%s: got no error from the schema for %s, want one", tc.name, src)
		}
		if _, err := declaration.ParseYAML("bad.yaml", []byte(src)); err == nil {
			t.Errorf("%s: got no error from the parser for %s, want one", tc.name, src)
		}
	}
	for _, doc := range []string{
		"node: n\nrevision: 1\nresources: []\n",
		"mesh: \"\"\nnode: n\nrevision: 1\nresources: []\n",
		"mesh: m\nnode: n\nrevision: 0\nresources: []\n",
		"mesh: m\nnode: n\nrevision: 1\nresources: []\nextra: 1\n",
	} {
		if err := s.Validate(instance(t, doc)); err == nil {
			t.Errorf("got no error from the schema for %q, want one", doc)
		}
	}
}

func TestSchemaFileIsJSON(t *testing.T) {
	b, err := os.ReadFile(filepath.Clean(schemaFile))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Errorf("%s is not JSON", schemaFile)
	}
}
