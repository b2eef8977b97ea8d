package declaration_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/declaration/declarationtest"
	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/journal"
	"github.com/mesh-host/mesh-host/journal/event"
	"github.com/mesh-host/mesh-host/linkproto"
)

// TestLimitsFit holds the limits to what they must fit, as limits.go's
// comment works it out, so that an edit to one of them, or to the message
// or record sizes they fit in, cannot break the relation unnoticed.
func TestLimitsFit(t *testing.T) {
	// 100,000 files of a realistic size fit, as YAML and as JSON.
	const files = 100_000
	file := fmt.Sprintf("  - file: {path: /srv/data/dir123/file-%06d.conf, content: \"setting-%d = %d\\n\", mode: \"0644\"}\n", files-1, files-1, 7*(files-1))
	one, err := declaration.ParseYAML("one.yaml", []byte("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n"+file))
	if err != nil {
		t.Fatal(err)
	}
	asJSON, _ := one.MarshalJSON()
	if n := 2 * files * max(len(file), len(asJSON)); n > declaration.MaxBytes || files > declaration.MaxResources {
		t.Errorf("%d files of %d bytes (%d as JSON) with room to double them: %d bytes, over MaxBytes %d, or over MaxResources %d",
			files, len(file), len(asJSON), n, declaration.MaxBytes, declaration.MaxResources)
	}
	// A push is bounded by its message, not by MaxBytes: whatever a push
	// carries, the host parses it under these limits. A message is at
	// most NATS's own ceiling on max_payload.
	if linkproto.MaxDeclarationSize > declaration.MaxBytes || linkproto.MaxDeclarationSize > 64<<20 {
		t.Errorf("linkproto.MaxDeclarationSize %d: over MaxBytes %d, or over NATS's 64 MiB max_payload", linkproto.MaxDeclarationSize, declaration.MaxBytes)
	}
	digest := "sha256:" + strings.Repeat("f", 64)
	// declaration.received at its largest, with its document and its
	// resources stored apart: the record does not grow with them.
	received, _ := json.Marshal(event.DeclarationReceivedPayload{Revision: 1<<64 - 1, Digest: digest, Source: "file:" + strings.Repeat("p", declaration.MaxPathBytes),
		DocumentSHA256: digest, DocumentBytes: declaration.MaxBytes, ResourcesSHA256: digest,
		Operator: strings.Repeat("o", 4096), Signer: strings.Repeat("N", 56), Signature: strings.Repeat("s", 86)})
	if len(received) > journal.MaxPayload/16 {
		t.Errorf("a declaration.received record may be %d bytes, want it far under journal.MaxPayload %d", len(received), journal.MaxPayload)
	}
	// A resource's ID, kind:path, is journaled as a record's resource.
	for _, k := range []drivers.Kind{drivers.KindFile, drivers.KindDirectory, drivers.KindArchive} {
		if n := len(k) + len(":") + declaration.MaxPathBytes; n > event.MaxName {
			t.Errorf("the ID of a %s at MaxPathBytes is %d bytes, over event.MaxName %d", k, n, event.MaxName)
		}
	}
	for _, k := range []drivers.Kind{drivers.KindPackage, drivers.KindUnit} {
		if n := len(k) + len(":") + declaration.MaxNameBytes; n > event.MaxName {
			t.Errorf("the ID of a %s at MaxNameBytes is %d bytes, over event.MaxName %d", k, n, event.MaxName)
		}
	}
	switch {
	case declaration.MaxPathBytes >= 4096:
		t.Errorf("MaxPathBytes %d: PATH_MAX is 4096 with the NUL", declaration.MaxPathBytes)
	case declaration.MaxPathElementBytes > 255, declaration.MaxNameBytes > 255:
		t.Errorf("MaxPathElementBytes %d, MaxNameBytes %d: NAME_MAX is 255", declaration.MaxPathElementBytes, declaration.MaxNameBytes)
	case declaration.MaxContentBytes >= linkproto.MaxDeclarationSize:
		t.Errorf("MaxContentBytes %d cannot be reached in a push of %d", declaration.MaxContentBytes, linkproto.MaxDeclarationSize)
	}
}

// A declaration at the limits parses, as YAML and as JSON, and so does its
// JSON form again; every ID it makes fits the journal's key. The largest
// a push carries fits its message.
func TestAtTheLimits(t *testing.T) {
	for name, d := range map[string]*declaration.Declaration{
		"maximal":       declarationtest.Maximal("lab", "web-1", 1),
		"most expanded": declarationtest.MostExpanded("lab", "web-1", 1),
	} {
		doc, err := d.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if len(doc) != declaration.MaxBytes {
			t.Fatalf("%s: %d bytes, want MaxBytes %d", name, len(doc), declaration.MaxBytes)
		}
		start := time.Now()
		y, err := declaration.ParseYAML(name+".yaml", doc) // JSON is YAML
		if err != nil {
			t.Fatalf("%s: ParseYAML: %.300v", name, err)
		}
		t.Logf("%s: %d resources parsed as YAML in %v", name, len(y.Resources), time.Since(start))
		j, err := declaration.ParseJSON(name+".json", doc)
		if err != nil {
			t.Fatalf("%s: ParseJSON: %.300v", name, err)
		}
		if y.Digest() != d.Digest() || j.Digest() != d.Digest() {
			t.Errorf("%s: parsed, it says something else", name)
		}
		for _, s := range j.Expanded() {
			if id := drivers.ID(s); len(id) > event.MaxName {
				t.Fatalf("%s: ID of %d bytes, over event.MaxName", name, len(id))
			}
		}
	}
	if n := len(declarationtest.Maximal("lab", "web-1", 1).Resources); n != declaration.MaxResources {
		t.Errorf("Maximal has %d resources, want MaxResources %d", n, declaration.MaxResources)
	}
	// The push form, and the Welcome's room around it.
	room := 1 << 10
	doc, _ := declarationtest.MaximalOf("lab", "web-1", 1, linkproto.MaxDeclarationSize-2*room).MarshalJSON()
	push := linkproto.Marshal(&linkproto.Declaration{Protocol: linkproto.ProtocolVersion, Mesh: "lab", Node: "web-1", Revision: 1, Document: doc,
		Operator: strings.Repeat("o", 64), Signer: strings.Repeat("N", 56), Signature: strings.Repeat("s", 86)})
	if len(push) > linkproto.MaxDeclarationSize-room {
		t.Errorf("the push of a %d-byte document is %d bytes, over the %d a Welcome leaves", len(doc), len(push), linkproto.MaxDeclarationSize-room)
	}
	if _, err := declaration.ParseJSON("push.json", doc); err != nil {
		t.Errorf("the largest push: %.300v", err)
	}
}

// wantLimit checks that err refuses by the limit named in want.
func wantLimit(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: parsed, want refused: %s", what, want)
	case !errors.Is(err, declaration.ErrLimit) || !errors.Is(err, declaration.ErrInvalid):
		t.Errorf("%s: got %.300v, want ErrLimit and ErrInvalid", what, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: got %.300v, want %q", what, err, want)
	}
}

// One byte or one resource more than a limit is refused, naming the limit
// and, where it has one, the place.
func TestOverTheLimits(t *testing.T) {
	one := declarationtest.Maximal("lab", "web-1", 1)
	fill := one.Resources[len(one.Resources)-1].(*drivers.FileSpec)
	fill.Content += "f"
	doc, _ := one.MarshalJSON()
	for _, parse := range []func(string, []byte) (*declaration.Declaration, error){declaration.ParseYAML, declaration.ParseJSON} {
		_, err := parse("big", doc)
		wantLimit(t, "one byte over MaxBytes", err, fmt.Sprintf("big: the declaration is %d bytes, over the limit for a declaration: %d bytes", declaration.MaxBytes+1, declaration.MaxBytes))
	}
	// The size is checked before anything reads the document.
	junk := append(doc, 0xff)
	_, err := declaration.ParseYAML("junk", junk)
	wantLimit(t, "MaxBytes+2 of what is not UTF-8", err, fmt.Sprintf("junk: the declaration is %d bytes, over the limit for a declaration", declaration.MaxBytes+2))
	if err := declaration.CheckJSONSize(doc); err == nil || !errors.Is(err, declaration.ErrLimit) {
		t.Errorf("CheckJSONSize of MaxBytes+1: got %v", err)
	}

	// YAML under MaxBytes whose JSON form is over it: "\0" is 2 bytes in
	// YAML and 6 in JSON.
	const n = 400_000 // NULs a file, under MaxContentBytes
	nuls := strings.Repeat(`\0`, n)
	var b strings.Builder
	b.WriteString("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n")
	for i := range declaration.MaxBytes/(6*n) + 1 {
		fmt.Fprintf(&b, "  - file: {path: /n%d, content: \"%s\"}\n", i, nuls)
	}
	_, err = declaration.ParseYAML("nul.yaml", []byte(b.String()))
	wantLimit(t, "JSON form over MaxBytes", err, "nul.yaml: as JSON, the form it travels and is journaled in, the declaration is")

	var many strings.Builder
	many.WriteString("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n")
	for i := range declaration.MaxResources + 1 {
		fmt.Fprintf(&many, "  - package: {name: p%d}\n", i)
	}
	_, err = declaration.ParseYAML("many.yaml", []byte(many.String()))
	wantLimit(t, "MaxResources+1", err, fmt.Sprintf("many.yaml:%d:5: resources[%d]: one resource more than the limit of resources in a declaration: %d",
		declaration.MaxResources+5, declaration.MaxResources, declaration.MaxResources))
	if es, ok := err.(declaration.Errors); ok && len(es) != 1 {
		t.Errorf("MaxResources+1: %d problems, want the limit alone", len(es))
	}

	long := declarationtest.LongPath("/srv", declaration.MaxPathBytes+1)
	version := "/srv" + strings.Repeat("/${version}", (declaration.MaxPathBytes-4)/65+1)
	name := strings.Repeat("n", declaration.MaxNameBytes+1)
	cases := []struct {
		what, resource, want string
	}{
		{"a path one byte over", `{file: {path: "` + long + `", content: ""}}`,
			fmt.Sprintf("x.yaml:5:19: resources[0].file.path: is %d bytes, over the limit for a path: %d bytes", declaration.MaxPathBytes+1, declaration.MaxPathBytes)},
		{"a directory's path", `{directory: {path: "` + long + `"}}`, "resources[0].directory.path: is 4087 bytes, over the limit for a path"},
		{"an archive's path, expanded", `{archive: {path: "` + version + `", source: "file:///a", digest: "sha256:` + strings.Repeat("0", 64) + `", format: tar}}`,
			"resources[0].archive.path: is 4099 bytes with ${version} expanded, over the limit for a path: 4086 bytes"},
		{"an element of 256 bytes", `{file: {path: "/srv/` + strings.Repeat("e", 256) + `", content: ""}}`,
			`resources[0].file.path: the element "eeeeeeeeeeeeeeeeeeeeeeee"… is 256 bytes, over the limit for an element of a path: 255 bytes`},
		{"a file's content", `{file: {path: /a, content: "` + strings.Repeat("c", declaration.MaxContentBytes+1) + `"}}`,
			"resources[0].file.content: is 524289 bytes, over the limit for content: 524288 bytes"},
		{"a unit's content", `{unit: {name: a.service, content: "` + strings.Repeat("c", declaration.MaxContentBytes+1) + `"}}`,
			"resources[0].unit.content: is 524289 bytes, over the limit for content"},
		{"a unit's name", `{unit: {name: ` + name[:248] + `.service, content: x}}`, "resources[0].unit.name: is 256 bytes, over the limit for a name: 255 bytes"},
		{"a package's name", `{package: {name: ` + name + `}}`, "resources[0].package.name: is 256 bytes, over the limit for a name"},
		{"an owner", `{file: {path: /a, content: "", owner: ` + name + `}}`, "resources[0].file.owner: is 256 bytes, over the limit for a name"},
		{"a group", `{directory: {path: /a, group: ` + name + `}}`, "resources[0].directory.group: is 256 bytes, over the limit for a name"},
	}
	for _, c := range cases {
		_, err := declaration.ParseYAML("x.yaml", []byte("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n  - "+c.resource+"\n"))
		wantLimit(t, c.what, err, c.want)
	}
	_, err = declaration.ParseJSON("x.json", []byte(`{"mesh":"lab","node":"`+name+`","revision":1,"resources":[]}`))
	wantLimit(t, "a node's name", err, "x.json:1:22: node: is 256 bytes, over the limit for a name")

	// At each limit exactly, the same resources parse.
	atPath := declarationtest.LongPath("/srv", declaration.MaxPathBytes)
	for _, r := range []string{
		`{file: {path: "` + atPath + `", content: "", owner: ` + name[1:] + `}}`,
		`{directory: {path: "` + atPath + `"}}`,
		`{file: {path: "/srv/` + strings.Repeat("e", 255) + `", content: "` + strings.Repeat("c", declaration.MaxContentBytes) + `"}}`,
		`{unit: {name: ` + name[:247] + `.service, content: x}}`,
	} {
		if _, err := declaration.ParseYAML("x.yaml", []byte("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n  - "+r+"\n")); err != nil {
			t.Errorf("at the limit: %.300v", err)
		}
	}
}

// A billion laughs: anchors and aliases that would expand to gigabytes. The
// YAML library keeps an alias as a pointer in its node tree and the parser
// refuses aliases, so the document is refused without ever being expanded.
func TestBillionLaughs(t *testing.T) {
	var b strings.Builder
	b.WriteString("mesh: lab\nnode: web-1\nrevision: 1\nl0: &l0 [" + strings.Repeat(`"lol",`, 9) + "\"lol\"]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [%s*l%d]\n", i, i, strings.Repeat(fmt.Sprintf("*l%d,", i-1), 9), i-1)
	}
	b.WriteString("resources: [*l9]\n")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := declaration.ParseYAML("laughs.yaml", []byte(b.String()))
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "anchors and aliases are not allowed") {
		t.Errorf("got %.300v, want aliases refused", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("parsing %d bytes allocated %d bytes", b.Len(), alloc)
	}
}

// Nesting is bounded by the libraries: yaml.v3 and encoding/json refuse a
// document nested deeper than 10,000, before the decoder walks it.
func TestDeepNesting(t *testing.T) {
	for _, c := range []struct {
		parse func(string, []byte) (*declaration.Declaration, error)
		doc   string
		want  string
	}{
		{declaration.ParseYAML, "mesh: lab\nnode: web-1\nrevision: 1\nresources: " + strings.Repeat("[", 500_000), "invalid YAML: exceeded max depth of 10000"},
		{declaration.ParseJSON, `{"mesh":"lab","node":"web-1","revision":1,"resources":` + strings.Repeat("[", 500_000), "exceeded max depth"},
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := c.parse("deep", []byte(c.doc))
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %.300v, want %q", err, c.want)
		}
		// Placing the YAML error parses prefixes: some garbage, bounded.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 512<<20 {
			t.Errorf("parsing %d bytes allocated %d bytes", len(c.doc), alloc)
		}
	}
}
