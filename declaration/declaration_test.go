package declaration_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

var update = flag.Bool("update", false, "rewrite the golden files (schema, testdata/bad/*.err) from what the code produces")

func mode(m drivers.Mode) *drivers.Mode { return &m }

// same reports whether two declarations say the same thing; where they
// were read from does not count.
func same(a, b *declaration.Declaration) bool {
	return a.Mesh == b.Mesh && a.Node == b.Node && a.Revision == b.Revision &&
		reflect.DeepEqual(a.Resources, b.Resources)
}

func mustYAML(t *testing.T, name, src string) *declaration.Declaration {
	t.Helper()
	d, err := declaration.ParseYAML(name, []byte(src))
	if err != nil {
		t.Fatalf("ParseYAML(%s): %v", name, err)
	}
	return d
}

const head = "mesh: home\nnode: web-1\nrevision: 3\n"

func TestParseYAML(t *testing.T) {
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		src  string
		want []drivers.Spec
	}{
		{"none", head + "resources: []\n", []drivers.Spec{}},
		{"file", head + "resources:\n- file:\n    path: /etc/motd\n    content: |\n      hello\n    mode: \"0640\"\n    owner: root\n    group: adm\n",
			[]drivers.Spec{&drivers.FileSpec{Path: "/etc/motd", Content: "hello\n", Mode: mode(0o640), Owner: "root", Group: "adm"}}},
		{"empty file", head + "resources:\n- file: {path: /etc/empty, content: \"\"}\n",
			[]drivers.Spec{&drivers.FileSpec{Path: "/etc/empty"}}},
		{"three-digit and setuid modes", head + "resources:\n- directory: {path: /srv, mode: \"755\"}\n- file: {path: /usr/local/bin/x, content: x, mode: \"4755\", special_bits: true}\n",
			[]drivers.Spec{&drivers.DirectorySpec{Path: "/srv", Mode: mode(0o755)}, &drivers.FileSpec{Path: "/usr/local/bin/x", Content: "x", Mode: mode(0o4755), SpecialBits: true}}},
		{"a setgid directory, said", head + "resources:\n- directory: {path: /srv/shared, mode: \"2775\", group: staff, special_bits: true}\n",
			[]drivers.Spec{&drivers.DirectorySpec{Path: "/srv/shared", Mode: mode(0o2775), Group: "staff", SpecialBits: true}}},
		{"directory without mode", head + "resources:\n- directory: {path: /srv/app}\n",
			[]drivers.Spec{&drivers.DirectorySpec{Path: "/srv/app"}}},
		{"package state defaults to present", head + "resources:\n- package: {name: nginx}\n- package: {name: libstdc++6, state: absent}\n",
			[]drivers.Spec{&drivers.PackageSpec{Name: "nginx", State: "present"}, &drivers.PackageSpec{Name: "libstdc++6", State: "absent"}}},
		{"unit", head + "resources:\n- unit: {name: getty@tty1.service, content: \"[Unit]\\n\", enabled: true}\n- unit: {name: backup.timer, content: x, enabled: false, active: true}\n",
			[]drivers.Spec{&drivers.UnitSpec{Name: "getty@tty1.service", Content: "[Unit]\n", Enabled: true}, &drivers.UnitSpec{Name: "backup.timer", Content: "x", Active: true}}},
		{"archive", head + "resources:\n- archive: {path: \"/opt/app/${version}\", source: \"file:///srv/app.tar.gz\", digest: \"" + digest + "\", format: tar.gz}\n",
			[]drivers.Spec{&drivers.ArchiveSpec{Path: "/opt/app/${version}", Source: "file:///srv/app.tar.gz", Digest: digest, Format: "tar.gz"}}},
		{"same path template, other digests", head + "resources:\n" +
			"- archive: {path: \"/opt/app/${version}\", source: \"https://a.example/x\", digest: \"" + digest + "\", format: zip}\n" +
			"- archive: {path: \"/opt/app/${version}\", source: \"http://a.example/y\", digest: \"sha256:" + strings.Repeat("0", 64) + "\", format: tar}\n",
			[]drivers.Spec{
				&drivers.ArchiveSpec{Path: "/opt/app/${version}", Source: "https://a.example/x", Digest: digest, Format: "zip"},
				&drivers.ArchiveSpec{Path: "/opt/app/${version}", Source: "http://a.example/y", Digest: "sha256:" + strings.Repeat("0", 64), Format: "tar"}}},
		{"same name, other kinds", head + "resources:\n- package: {name: nginx}\n- unit: {name: nginx.service, content: x}\n- file: {path: /nginx, content: x}\n",
			[]drivers.Spec{&drivers.PackageSpec{Name: "nginx", State: "present"}, &drivers.UnitSpec{Name: "nginx.service", Content: "x"}, &drivers.FileSpec{Path: "/nginx", Content: "x"}}},
		{"leading document marker and comments", "---\n# the web front\n" + head + "resources: [] # none yet\n...\n", []drivers.Spec{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := mustYAML(t, tc.name+".yaml", tc.src)
			if d.Mesh != "home" || d.Node != "web-1" || d.Revision != 3 {
				t.Errorf("got mesh %q node %q revision %d, want home web-1 3", d.Mesh, d.Node, d.Revision)
			}
			if !reflect.DeepEqual(d.Resources, tc.want) {
				got, _ := json.Marshal(d.Resources)
				want, _ := json.Marshal(tc.want)
				t.Errorf("got resources %s\nwant %s", got, want)
			}
		})
	}
}

func examples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("got examples %v (%v), want at least two", files, err)
	}
	return files
}

func TestExamplesParse(t *testing.T) {
	for _, f := range examples(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := declaration.ParseYAML(filepath.Base(f), b)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(d.Resources) < 3 {
			t.Errorf("%s: got %d resources, want a realistic example", f, len(d.Resources))
		}
	}
}

// TestWireExample: examples/web.json is web.yaml's wire form.
func TestWireExample(t *testing.T) {
	y, err := os.ReadFile("../examples/web.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := os.ReadFile("../examples/web.json")
	if err != nil {
		t.Fatal(err)
	}
	fromYAML := mustYAML(t, "web.yaml", string(y))
	fromJSON, err := declaration.ParseJSON("web.json", j)
	if err != nil {
		t.Fatal(err)
	}
	if !same(fromYAML, fromJSON) {
		t.Errorf("got web.json %+v, want web.yaml %+v", fromJSON, fromYAML)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, f := range examples(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d := mustYAML(t, f, string(b))
		wire, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		back, err := declaration.ParseJSON(f+".json", wire)
		if err != nil {
			t.Fatalf("%s: ParseJSON(MarshalJSON): %v\n%s", f, err, wire)
		}
		if !same(d, back) {
			t.Errorf("%s: got %+v after the round trip, want %+v", f, back, d)
		}
		again, err := back.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(wire) {
			t.Errorf("%s: got wire form\n%s\nafter the round trip, want\n%s", f, again, wire)
		}
		// encoding/json reaches the same methods.
		var viaJSON declaration.Declaration
		if err := json.Unmarshal(wire, &viaJSON); err != nil {
			t.Fatal(err)
		}
		if !same(d, &viaJSON) {
			t.Errorf("%s: got %+v from json.Unmarshal, want %+v", f, viaJSON, d)
		}
	}
}

func TestMarshalJSONShape(t *testing.T) {
	d := &declaration.Declaration{Mesh: "home", Node: "n", Revision: 1, Resources: []drivers.Spec{
		&drivers.FileSpec{Path: "/a", Content: "x && y <z>", Mode: mode(0o600)},
		&drivers.PackageSpec{Name: "nginx", State: "present"},
	}}
	got, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mesh":"home","node":"n","revision":1,"resources":[{"file":{"path":"/a","content":"x && y <z>","mode":"0600"}},{"package":{"name":"nginx","state":"present"}}]}`
	if string(got) != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	empty, err := (&declaration.Declaration{Mesh: "m", Node: "n", Revision: 1}).MarshalJSON()
	if err != nil || !strings.Contains(string(empty), `"resources":[]`) {
		t.Errorf("got %s, %v for no resources, want \"resources\":[]", empty, err)
	}
	if _, err := (&declaration.Declaration{Resources: []drivers.Spec{(*drivers.FileSpec)(nil)}}).MarshalJSON(); err == nil {
		t.Error("got no error for a nil resource, want one")
	}
}

func TestDigestStable(t *testing.T) {
	a := `mesh: home
node: web-1
revision: 3
resources:
  - file:
      path: /etc/app/app.conf
      content: "listen 8080\n"
      mode: "0640"
  - package: {name: nginx}
  - unit: {name: app.service, content: "[Unit]\n", enabled: true}
`
	// The same declaration: other key order, flow and block styles, other
	// quoting and scalar styles, comments, a default spelled out, a false
	// bool given, a three-digit mode.
	b := `# reordered
resources:
- file:
    mode: '640'
    content: |
      listen 8080
    path: "/etc/app/app.conf"
- package: {state: present, "name": "nginx"}
- unit:
    enabled: true
    active: false
    content: "[Unit]\n"
    name: app.service
revision: 3
node: 'web-1'
mesh:   home
`
	da, db := mustYAML(t, "a.yaml", a), mustYAML(t, "b.yaml", b)
	if da.Digest() != db.Digest() {
		ja, _ := da.MarshalJSON()
		jb, _ := db.MarshalJSON()
		t.Errorf("got digests %s and %s for the same declaration\n%s\n%s", da.Digest(), db.Digest(), ja, jb)
	}
	if !strings.HasPrefix(da.Digest(), "sha256:") || len(da.Digest()) != len("sha256:")+64 {
		t.Errorf("got digest %q, want sha256: and 64 hex digits", da.Digest())
	}
	wire, _ := da.MarshalJSON()
	dj, err := declaration.ParseJSON("a.json", wire)
	if err != nil {
		t.Fatal(err)
	}
	if dj.Digest() != da.Digest() {
		t.Errorf("got digest %s from JSON, want %s from YAML", dj.Digest(), da.Digest())
	}
	for _, change := range []struct{ from, to string }{
		{"revision: 3", "revision: 4"},
		{`listen 8080\n`, `listen 8081\n`},
		{`"0640"`, `"0644"`},
		{"{name: nginx}", "{name: nginx, state: absent}"},
		{"enabled: true", "enabled: false"},
	} {
		changed := mustYAML(t, "c.yaml", strings.Replace(a, change.from, change.to, 1))
		if changed.Digest() == da.Digest() {
			t.Errorf("got the same digest after %s → %s, want another", change.from, change.to)
		}
	}
}

func TestExpanded(t *testing.T) {
	hex := strings.Repeat("0123456789abcdef", 4)
	d := mustYAML(t, "x.yaml", head+`resources:
- archive:
    path: /opt/app/versions/${version}
    source: https://cas.example/sha256/${version}?name=app-${version}.tar.gz
    digest: sha256:`+hex+`
    format: tar.gz
- file: {path: /etc/app/version, content: "${version}\n", mode: "0644"}
- package: {name: nginx}
`)
	got := d.Expanded()
	want := []drivers.Spec{
		&drivers.ArchiveSpec{Path: "/opt/app/versions/" + hex, Source: "https://cas.example/sha256/" + hex + "?name=app-" + hex + ".tar.gz",
			Digest: "sha256:" + hex, Format: "tar.gz"},
		&drivers.FileSpec{Path: "/etc/app/version", Content: "${version}\n", Mode: mode(0o644)},
		&drivers.PackageSpec{Name: "nginx", State: "present"},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		t.Errorf("got %s\nwant %s", g, w)
	}
	// Copies: changing them leaves the declaration as it was.
	got[1].(*drivers.FileSpec).Path = "/changed"
	*got[1].(*drivers.FileSpec).Mode = 0o777
	got[2].(*drivers.PackageSpec).State = "absent"
	if f := d.Resources[1].(*drivers.FileSpec); f.Path != "/etc/app/version" || *f.Mode != 0o644 {
		t.Errorf("got %+v mode %v after changing the copy, want the declaration unchanged", f, *f.Mode)
	}
	if p := d.Resources[2].(*drivers.PackageSpec); p.State != "present" {
		t.Errorf("got state %q after changing the copy, want present", p.State)
	}
	if a := d.Resources[0].(*drivers.ArchiveSpec); a.Path != "/opt/app/versions/${version}" {
		t.Errorf("got path %q in the declaration, want it unexpanded", a.Path)
	}
}

func TestRefuse(t *testing.T) {
	d := mustYAML(t, "host.yaml", head+`resources:
  - package: {name: mesh-host}
  - unit:
      name: app.service
      content: x
  - unit:
      name: mesh-host.service
      content: "[Service]\nExecStart=/usr/bin/mesh-host serve\n"
`)
	err := d.RefuseInstallation(declaration.Installation{Unit: "mesh-host.service"})
	want := `host.yaml:10:13: resources[2].unit.name: "mesh-host.service" is the host's own unit: the installation manages it, never a declaration`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v\nwant %s", err, want)
	}
	if !errors.Is(err, declaration.ErrOwnUnit) || !errors.Is(err, declaration.ErrInvalid) {
		t.Errorf("got %v, want it to match ErrOwnUnit and ErrInvalid", err)
	}
	var e *declaration.Error
	if !errors.As(err, &e) || e.Line != 10 {
		t.Errorf("got %#v, want an *Error at line 10", err)
	}
	for _, unit := range []string{"other.service", "mesh-host", "mesh-host.socket"} {
		if err := d.RefuseInstallation(declaration.Installation{Unit: unit}); err != nil {
			t.Errorf("Refuse(%q): got %v, want nil", unit, err)
		}
	}
	// Built in Go, a declaration has no positions to give.
	built := &declaration.Declaration{Resources: []drivers.Spec{&drivers.UnitSpec{Name: "mesh-host.service", Content: "x"}}}
	want = `resources[0].unit.name: "mesh-host.service" is the host's own unit: the installation manages it, never a declaration`
	if err := built.RefuseInstallation(declaration.Installation{Unit: "mesh-host.service"}); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestJSONMessages: the wire form is held to the same rules, in the same
// words, placed by line and column in the JSON.
func TestJSONMessages(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, json, want string
		// jsonWant, if given, is what the JSON gets instead: the same
		// message, naming a line of the JSON.
		jsonWant string
	}{
		{"number for a mode",
			head + "resources:\n- file: {path: /a, content: x, mode: 644}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"file":{"path":"/a","content":"x","mode":644}}]}`,
			`resources[0].file.mode: must be an octal string such as "0644", not the number 644: quote it`, ""},
		{"unknown field",
			head + "resources:\n- file: {path: /a, content: x, perms: \"0644\"}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"file":{"path":"/a","content":"x","perms":"0644"}}]}`,
			`resources[0].file.perms: unknown field (known: path, content, mode, owner, group, special_bits, secret, requires, notify, subscribe)`, ""},
		{"two keys",
			head + "resources:\n- file: {path: /a, content: x}\n  directory: {path: /b}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"file":{"path":"/a","content":"x"},"directory":{"path":"/b"}}]}`,
			`resources[0]: has 2 keys (file, directory); an entry has exactly one, the kind: start each resource with its own "-"`, ""},
		{"string for a number",
			"mesh: home\nnode: web-1\nrevision: \"3\"\nresources: []\n",
			`{"mesh":"home","node":"web-1","revision":"3","resources":[]}`,
			`revision: must be a whole number of at least 1, not the string "3"`, ""},
		{"string for a bool",
			head + "resources:\n- unit: {name: a.service, content: x, enabled: \"true\"}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"unit":{"name":"a.service","content":"x","enabled":"true"}}]}`,
			`resources[0].unit.enabled: must be true or false, not the string "true"`, ""},
		{"null for a string",
			head + "resources:\n- file: {path: /a, content: null}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"file":{"path":"/a","content":null}}]}`,
			`resources[0].file.content: must be a string, not null`, ""},
		{"duplicate",
			head + "resources:\n- package: {name: nginx}\n- package: {name: nginx, state: absent}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"package":{"name":"nginx"}},{"package":{"name":"nginx","state":"absent"}}]}`,
			`resources[1].package.name: duplicate resource "package:nginx": also declared at line 5`,
			`resources[1].package.name: duplicate resource "package:nginx": also declared at line 1`},
		{"key given twice",
			head + "resources:\n- package: {name: nginx, name: curl}\n",
			`{"mesh":"home","node":"web-1","revision":3,"resources":[{"package":{"name":"nginx","name":"curl"}}]}`,
			`resources[0].package.name: given twice; first at line 5`,
			`resources[0].package.name: given twice; first at line 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			jsonWant := tc.want
			if tc.jsonWant != "" {
				jsonWant = tc.jsonWant
			}
			_, yerr := declaration.ParseYAML("d.yaml", []byte(tc.yaml))
			_, jerr := declaration.ParseJSON("d.json", []byte(tc.json))
			for _, c := range []struct {
				err  error
				want string
			}{{yerr, tc.want}, {jerr, jsonWant}} {
				var es declaration.Errors
				if !errors.As(c.err, &es) || len(es) != 1 {
					t.Fatalf("got %v, want one problem", c.err)
				}
				if got := es[0].Field + ": " + es[0].Msg; got != c.want {
					t.Errorf("got %s\nwant %s", got, c.want)
				}
			}
		})
	}
}

// TestJSONPositions: line and column come from the byte offset.
func TestJSONPositions(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
	}{
		{"field", "{\n  \"mesh\": \"home\",\n  \"node\": \"\",\n  \"revision\": 1,\n  \"resources\": []\n}",
			"d.json:3:11: node: must not be empty"},
		{"after multibyte text", "{\"mesh\": \"h\u00e9\u00e9\", \"node\": \"n\", \"revision\": 0, \"resources\": []}",
			"d.json:1:42: revision: must be at least 1, not 0"},
		{"syntax", "{\n  \"mesh\": \"home\",\n  \"node\": }\n",
			"d.json:3:11: invalid JSON: invalid character '}' looking for beginning of value"},
		{"trailing data", "{\"mesh\": \"m\", \"node\": \"n\", \"revision\": 1, \"resources\": []}\n{}",
			"d.json:2:1: invalid JSON: invalid character '{' after top-level value"},
		{"truncated", "{\"mesh\": \"m\"",
			"d.json:1:13: invalid JSON: unexpected end of JSON input"},
		{"empty", "", "d.json:1:1: invalid JSON: unexpected end of JSON input"},
		{"YAML is not JSON", "mesh: home\n", "d.json:1:1: invalid JSON: invalid character 'm' looking for beginning of value"},
		{"not an object", "[]", "d.json:1:1: a declaration is a mapping of mesh, node, revision and resources, not a list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := declaration.ParseJSON("d.json", []byte(tc.src))
			if err == nil || err.Error() != tc.want {
				t.Errorf("got %v\nwant %s", err, tc.want)
			}
			if !errors.Is(err, declaration.ErrInvalid) {
				t.Errorf("got %v, want it to match ErrInvalid", err)
			}
		})
	}
}

// TestJSONStrings: strings JSON allows and YAML's reader would not.
func TestJSONStrings(t *testing.T) {
	src := `{"mesh":"home","node":"n","revision":1,"resources":[{"file":{"path":"/a","content":"\ud83d\ude00 \u007f\u0085 \u0000 \/"}}]}`
	d, err := declaration.ParseJSON("d.json", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.Resources[0].(*drivers.FileSpec).Content, "\U0001F600 \x7f\u0085 \x00 /"; got != want {
		t.Errorf("got content %q, want %q", got, want)
	}
	wire, _ := d.MarshalJSON()
	back, err := declaration.ParseJSON("d.json", wire)
	if err != nil || !same(d, back) {
		t.Errorf("got %v, %v after a round trip of %s", back, err, wire)
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    declaration.Error
		want string
	}{
		{declaration.Error{File: "a.yaml", Line: 3, Column: 7, Field: "resources[0].file.mode", Msg: "bad"}, "a.yaml:3:7: resources[0].file.mode: bad"},
		{declaration.Error{File: "a.yaml", Line: 1, Column: 1, Msg: "empty"}, "a.yaml:1:1: empty"},
		{declaration.Error{Line: 2, Column: 1, Field: "mesh", Msg: "bad"}, "2:1: mesh: bad"},
		{declaration.Error{Field: "mesh", Msg: "bad"}, "mesh: bad"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestUnmarshalJSONInMessage(t *testing.T) {
	var msg struct {
		Declaration *declaration.Declaration `json:"declaration"`
	}
	err := json.Unmarshal([]byte(`{"declaration": {"mesh":"home","node":"n","revision":1,"resources":[{"package":{"name":"nginx"}}]}}`), &msg)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Declaration.Resources; len(got) != 1 || !reflect.DeepEqual(got[0], &drivers.PackageSpec{Name: "nginx", State: "present"}) {
		t.Errorf("got %+v, want one package nginx", got)
	}
	err = json.Unmarshal([]byte(`{"declaration": {"mesh":"home","node":"n","revision":1,"resources":[{"package":{"name":"Nginx"}}]}}`), &msg)
	if !errors.Is(err, declaration.ErrInvalid) {
		t.Errorf("got %v, want ErrInvalid", err)
	}
}

// TestSecretContent: content: {secret: NAME} names a secret; the wire form
// carries it as the secret field, sealed or not, and round-trips; nothing
// of a secret's value is in a declaration before the control plane seals
// it, and what it seals is never the value.
func TestSecretContent(t *testing.T) {
	d, err := declaration.ParseYAML("s.yaml", []byte("mesh: home\nnode: web-1\nrevision: 1\nresources:\n  - file:\n      path: /etc/db.pass\n      content: {secret: db-password}\n      mode: \"0600\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	f := d.Resources[0].(*drivers.FileSpec)
	if f.Secret == nil || f.Secret.Name != "db-password" || f.Content != "" || f.Secret.Sealed != "" {
		t.Fatalf("parsed %+v %+v", f, f.Secret)
	}
	f.Secret.Sealed, f.Secret.Sender = "c2VhbGVk", "X"+strings.Repeat("A", 55)
	wire, err := d.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(wire), `"secret":{"name":"db-password","sealed":"c2VhbGVk","sender":"XAAAA`) {
		t.Errorf("wire form: %s", wire)
	}
	for name, parse := range map[string]func([]byte) (*declaration.Declaration, error){
		"ParseJSON":    func(b []byte) (*declaration.Declaration, error) { return declaration.ParseJSON("wire", b) },
		"DecodeStored": declaration.DecodeStored,
	} {
		back, err := parse(wire)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if s := back.Resources[0].(*drivers.FileSpec).Secret; s == nil || s.Name != f.Secret.Name || s.Sealed != f.Secret.Sealed || s.Sender != f.Secret.Sender {
			t.Errorf("%s: secret %+v, want %+v", name, s, f.Secret)
		}
		if back.Digest() != d.Digest() {
			t.Errorf("%s: the digest changed in the round trip", name)
		}
	}
}

// TestRevisionOptional: a file may leave revision out, for whoever stores
// it to number; one it states is still held to at least 1, and a JSON
// document (what travels) without one parses to 0, which the link refuses
// as it refuses a push without a revision.
func TestRevisionOptional(t *testing.T) {
	d := mustYAML(t, "bare.yaml", "mesh: home\nnode: web-1\nresources:\n  - directory: {path: /etc/app}\n")
	if d.Revision != 0 || d.Mesh != "home" || d.Node != "web-1" || len(d.Resources) != 1 {
		t.Errorf("got %+v, want revision 0 (left out) and the rest parsed", d)
	}
	for src, want := range map[string]string{
		"mesh: home\nnode: web-1\nrevision: 0\nresources: []\n":  "bad.yaml:3:11: revision: must be at least 1, not 0",
		"mesh: home\nnode: web-1\nrevision: -2\nresources: []\n": "bad.yaml:3:11: revision: must be at least 1, not -2",
		"mesh: home\nrevision: 2\nresources: []\n":               "bad.yaml:1:1: node: required field is missing",
	} {
		_, err := declaration.ParseYAML("bad.yaml", []byte(src))
		if err == nil || err.Error() != want {
			t.Errorf("ParseYAML(%q): got %v, want %s", src, err, want)
		}
	}
}
