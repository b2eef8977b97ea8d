package declaration

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// sameAsWhole fails t unless ParseYAML, which parses a resources list in
// chunks where it can, gives exactly what the whole parse gives: the same
// declaration, or the same errors. It says whether the chunks were used.
func sameAsWhole(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string, data []byte) (chunked bool) {
	t.Helper()
	got, gotErr := ParseYAML(name, data)
	want, wantErr := parseWhole(name, data)
	if err := checkSize(name, data); err != nil {
		want, wantErr = nil, err
	} else if err := checkUTF8(name, data); err != nil {
		want, wantErr = nil, err
	}
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("%s: errors differ:\nchunked: %v\nwhole:   %v\n%s", name, gotErr, wantErr, data)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: declarations differ:\nchunked: %+v\nwhole:   %+v\n%s", name, got, want, data)
	}
	if l, ok := listOf(data); ok {
		_, err, _ := parseInChunks(name, l, MaxResources)
		return err == nil
	}
	return false
}

// TestChunkedParseOfEveryDeclarationHere: the repository's declarations,
// good and bad.
func TestChunkedParseOfEveryDeclarationHere(t *testing.T) {
	var files []string
	for _, pattern := range []string{"testdata/bad/*.yaml", "../examples/*.yaml"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 50 {
		t.Fatalf("found %d declarations: the globs are wrong", len(files))
	}
	chunked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if sameAsWhole(t, f, data) {
			chunked++
		}
	}
	if chunked == 0 {
		t.Fatal("no declaration here was parsed in chunks: the test compares nothing")
	}
}

// entry writes one file resource in one of the forms a person writes.
func entry(form, i, indent int) string {
	pad := strings.Repeat(" ", indent)
	path := fmt.Sprintf("/etc/app/f%05d.conf", i)
	switch form {
	case 0:
		return fmt.Sprintf("%s- file: {path: %s, content: \"v%d\\n\", mode: \"0640\"}\n", pad, path, i)
	case 1:
		return fmt.Sprintf("%s- file:\n%s    path: %s\n%s    content: |\n%s      - line one %d\n%s      - line two\n", pad, pad, path, pad, pad, i, pad)
	case 2:
		return fmt.Sprintf("%s-\n%s  file:\n%s    path: %s\n%s    content: x\n", pad, pad, pad, path, pad)
	case 3:
		return fmt.Sprintf("# about %d\n%s- file: {path: %s, content: \"\"}   # trailing\n\n", i, pad, path)
	default:
		return fmt.Sprintf("%s- file: {path: %s,\n%s    content: 'two\n%s    lines'}\n", pad, path, pad, pad)
	}
}

// hazards are lines that make a list something the chunked parse must
// not get wrong: each is inserted after some entry.
var hazards = []string{
	"%s- file: {path: /etc/x, content: \"open\n%s- file: {path: /etc/y}\"}\n", // a string open across an entry's line
	"%s- file: &a {path: /etc/anchor}\n%s- file: *a\n",                        // an alias
	"%s- file: {path: /etc/app/f00000.conf}\n%s\n",                            // a duplicate, maybe across chunks
	"%s- \tfile: {path: /etc/tab}\n%s\n",                                      // a tab
	" - file: {path: /etc/under}\n%s%s\n",                                     // a line between the margin and the list
	"%s- [not, a, mapping]\n%s\n",                                             // a bad entry
	"---\n%s%s\n",                                                             // a second document
	"%s- file: {path: /etc/flow,\ncontent: at-margin}\n%s\n",                  // a flow mapping back at the margin
	"resources:\n%s%s\n",                                                      // the field twice
	"%s- file: {path: /etc/cr,\r content: x}\n%s\n",                           // a line broken by "\r" alone
	"%s- file: {path: /etc/ls, content: \"a\u2028b\"}\n%s\n",                  // by LS
}

// generatedDoc is one declaration of n file entries in the forms form
// gives, at a list indentation, with hazards[hazard] after entry at
// (none when hazard < 0).
type generatedDoc struct {
	indent, n, hazard, at int
	form                  func(i int) int
	crlf, leadingMarker   bool
	revisionLast          bool
}

func (g generatedDoc) text() []byte {
	var sb strings.Builder
	if g.leadingMarker {
		sb.WriteString("---\n")
	}
	sb.WriteString("mesh: m1\nnode: n1\nresources:   # the list\n")
	for i := range g.n {
		sb.WriteString(entry(g.form(i), i, g.indent))
		if i == g.at && g.hazard >= 0 {
			pad := strings.Repeat(" ", g.indent)
			fmt.Fprintf(&sb, hazards[g.hazard], pad, pad)
		}
	}
	if g.revisionLast {
		sb.WriteString("revision: 7\n")
	} else {
		sb.WriteString("\nrevision: 7 # after\n")
	}
	doc := sb.String()
	if g.crlf {
		doc = strings.ReplaceAll(doc, "\n", "\r\n")
	}
	return []byte(doc)
}

// TestChunkedParseAgreesWithWholeParse: documents of many entries in
// mixed forms, sometimes with a hazard, at list indentations 0, 2 and 4,
// over chunk boundaries.
func TestChunkedParseAgreesWithWholeParse(t *testing.T) {
	// First every hazard, and none, at a chunk's last entry of a list of
	// three chunks, in each indentation: the random documents below may,
	// in a short run, draw no list long enough to be chunked.
	chunked := 0
	for indent := range []int{0, 2, 4} {
		for hazard := -1; hazard < len(hazards); hazard++ {
			g := generatedDoc{indent: 2 * indent, n: 2*chunkItems + 3, hazard: hazard, at: chunkItems - 1,
				form: func(i int) int { return i % 5 }, crlf: hazard%2 == 0, revisionLast: hazard%3 == 0}
			name := fmt.Sprintf("indent%d-hazard%d.yaml", 2*indent, hazard)
			if sameAsWhole(t, name, g.text()) {
				chunked++
			}
		}
	}
	if chunked == 0 {
		t.Fatal("no declaration of three chunks was parsed in chunks: the test compares nothing")
	}

	rapid.Check(t, func(t *rapid.T) {
		g := generatedDoc{leadingMarker: rapid.Bool().Draw(t, "leading marker")}
		g.indent = rapid.SampledFrom([]int{0, 2, 4}).Draw(t, "indent")
		// Drawn from sizes about the chunks' edges: rapid favours small
		// numbers, which would leave every list in one chunk.
		g.n = rapid.SampledFrom([]int{0, 1, 2, 9, chunkItems - 1, chunkItems, chunkItems + 1, 2*chunkItems + 3}).Draw(t, "entries")
		g.hazard = rapid.IntRange(-1, len(hazards)-1).Draw(t, "hazard")
		g.at = rapid.SampledFrom([]int{0, g.n / 3, chunkItems - 1, chunkItems, g.n - 1}).Draw(t, "at")
		g.form = func(int) int { return rapid.IntRange(0, 4).Draw(t, "form") }
		g.crlf = rapid.Bool().Draw(t, "crlf")
		g.revisionLast = rapid.Bool().Draw(t, "revision last")
		sameAsWhole(t, "gen.yaml", g.text())
	})
}

// FuzzChunkedParse: whatever the input, the chunked parse and the whole
// parse agree.
func FuzzChunkedParse(f *testing.F) {
	f.Add([]byte("mesh: m\nnode: n\nrevision: 1\nresources:\n  - file: {path: /etc/a}\n  - file: {path: /etc/b}\n"))
	f.Add([]byte("mesh: m\nnode: n\nrevision: 1\nresources:\n- file: {path: /etc/a, content: \"x\n- file: {path: /etc/b}\"}\n"))
	f.Add([]byte("resources:\n  - package: {name: curl}\nmesh: m\nnode: n\nrevision: 2\n"))
	f.Add([]byte("mesh: m\nnode: n\nrevision: 1\nresources:\n  - file: {path: /etc/a,\r content: x}\n  - file: {path: /etc/b, content: \"\u0085\"}\n"))
	f.Add([]byte("mesh: m\nnode: n\nrevision: 1\nresources: [{file: {path: /etc/a}}, {file: {path: \"/etc/b,\"}},\n  {package: {name: c}}]\n"))
	f.Add([]byte(`{"mesh": "m", "node": "n", "revision": 1, "resources": [{"package": {"name": "a"}}, {"package": {"name": "b"}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		sameAsWhole(t, "f.yaml", data)
		// At a limit of one resource, a longer list is refused early.
		sameRefusalAtLimit(t, "f.yaml", data, 1)
	})
}

// BenchmarkParseYAMLFiles parses a declaration of n file resources, as
// ParseYAML does (in chunks) and whole, with the heap it allocates.
//
//	go test ./declaration -run '^$' -bench ParseYAMLFiles -benchmem
func BenchmarkParseYAMLFiles(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		var sb strings.Builder
		sb.WriteString("mesh: m1\nnode: n1\nrevision: 1\nresources:\n")
		for i := range n {
			sb.WriteString(entry(0, i, 2))
		}
		data := []byte(sb.String())
		for _, p := range []struct {
			name  string
			parse func(string, []byte) (*Declaration, error)
		}{{"chunked", ParseYAML}, {"whole", parseWhole}} {
			b.Run(fmt.Sprintf("files=%d/%s", n, p.name), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, err := p.parse("b.yaml", data); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A syntax error deep in a long list of {...} entries is placed on its
// own line, not inside an earlier entry: every prefix that ends inside an
// entry fails with the same problem as the whole.
func TestSyntaxErrorDeepInALongListNamesItsLine(t *testing.T) {
	for _, c := range []struct{ name, entry, want string }{
		{"unclosed", `  - file: {path: /etc/app/bad.conf, content: "x\n", mode: "0640"`, `did not find expected ',' or '}'`},
		{"quotes", `  - file: {path: /etc/app/bad.conf, content: "x\n', mode: "0640"}`, `did not find expected ',' or '}'`},
		{"indent", `   - file: {path: /etc/app/bad.conf, content: "x", mode: "0640"}`, `did not find expected '-' indicator`},
	} {
		t.Run(c.name, func(t *testing.T) {
			const entries, bad = 3000, 2345
			var b strings.Builder
			b.WriteString("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n")
			for i := range entries {
				if i == bad {
					b.WriteString(c.entry + "\n")
					continue
				}
				fmt.Fprintf(&b, "  - file: {path: /etc/app/f%05d.conf, content: \"setting-%d\\n\", mode: \"0640\"}\n", i, i)
			}
			_, err := ParseYAML("long.yaml", []byte(b.String()))
			errs, ok := err.(Errors)
			if !ok || len(errs) != 1 {
				t.Fatalf("got %v, want one error", err)
			}
			if want := 4 + bad + 1; errs[0].Line != want || !strings.Contains(errs[0].Msg, c.want) {
				t.Errorf("got %v, want line %d: %s", errs[0], want, c.want)
			}
		})
	}
}

// sameRefusalAtLimit fails t unless parseYAML at a limit of most
// resources, which refuses a list over it without parsing the rest of the
// document, says what the whole parse at that limit says; or, having
// refused by the limit, the whole parse finds a syntax error in what the
// early refusal never read. It never accepts what the whole parse
// refuses. It says whether the list was refused early.
func sameRefusalAtLimit(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string, data []byte, most int) (early bool) {
	t.Helper()
	got, gotErr := parseYAML(name, data, most)
	want, wantErr := parseWholeAt(name, data, most)
	if err := checkSize(name, data); err != nil {
		want, wantErr = nil, err
	} else if err := checkUTF8(name, data); err != nil {
		want, wantErr = nil, err
	}
	if l, ok := listOf(data); ok && len(l.items) > most {
		_, _, early = parseInChunks(name, l, most)
	} else if l, ok := flowListOf(data); ok && len(l.items) > most {
		_, _, early = parseInChunks(name, l, most)
	}
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		if !early || wantErr == nil || !strings.Contains(wantErr.Error(), "invalid YAML") {
			t.Fatalf("%s at a limit of %d: errors differ:\nearly: %v\nwhole: %v\n%s", name, most, gotErr, wantErr, data)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s at a limit of %d: declarations differ:\nearly: %+v\nwhole: %+v\n%s", name, most, got, want, data)
	}
	return early
}

// flowEntry writes one resource of a list in flow style.
func flowEntry(form, i int) string {
	switch form {
	case 0:
		return fmt.Sprintf(`{package: {name: p%d}}`, i)
	case 1:
		return fmt.Sprintf(`{"file": {"path": "/etc/f%d", "content": "a, b]\"}"}}`, i)
	case 2:
		return fmt.Sprintf("{file: {path: '/etc/it''s %d', # a comment, ]\n   content: x}}", i)
	case 3:
		return fmt.Sprintf(`package: {name: p%d}`, i)
	default:
		return fmt.Sprintf("{directory: {path: /srv/a b\n    c%d}}", i)
	}
}

// TestRefusedWhenTheLimitIsCrossed: a list over the limit, in block style,
// in flow style, and as JSON read as YAML, is refused as the whole parse
// refuses it, at a limit small enough to reach; with hazards in it, the
// refusal is still the whole parse's, or the whole parse is used.
func TestRefusedWhenTheLimitIsCrossed(t *testing.T) {
	early := 0
	for _, most := range []int{1, 3, chunkItems, chunkItems + 1} {
		for _, n := range []int{most, most + 1, most + 2, 2*chunkItems + 3} {
			var block, flow, json strings.Builder
			block.WriteString("mesh: m1\nnode: n1\nresources:\n")
			flow.WriteString("mesh: m1\nnode: n1\nresources: [\n")
			json.WriteString(`{"mesh": "m1", "node": "n1", "resources": [`)
			for i := range n {
				block.WriteString(entry(i%5, i, 2))
				sep := ",\n  "
				if i == n-1 {
					sep = "\n]"
				}
				flow.WriteString(flowEntry(i%5, i) + sep)
				if i > 0 {
					json.WriteString(", ")
				}
				fmt.Fprintf(&json, `{"package": {"name": "p%d"}}`, i)
			}
			flow.WriteString("  # end\nrevision: 3\n")
			json.WriteString(`], "revision": 3, "extra": 1}`)
			for name, doc := range map[string]string{"block": block.String(), "flow": flow.String(), "json": json.String()} {
				if sameRefusalAtLimit(t, fmt.Sprintf("%s-%d-of-%d.yaml", name, n, most), []byte(doc), most) {
					early++
				}
			}
		}
	}
	if early == 0 {
		t.Fatal("no list was refused early: the test compares nothing")
	}
	rapid.Check(t, func(t *rapid.T) {
		g := generatedDoc{leadingMarker: rapid.Bool().Draw(t, "leading marker")}
		g.indent = rapid.SampledFrom([]int{0, 2, 4}).Draw(t, "indent")
		g.n = rapid.SampledFrom([]int{1, 2, 9, chunkItems + 1}).Draw(t, "entries")
		g.hazard = rapid.IntRange(-1, len(hazards)-1).Draw(t, "hazard")
		g.at = rapid.SampledFrom([]int{0, g.n / 3, g.n - 1}).Draw(t, "at")
		g.form = func(int) int { return rapid.IntRange(0, 4).Draw(t, "form") }
		g.crlf = rapid.Bool().Draw(t, "crlf")
		g.revisionLast = rapid.Bool().Draw(t, "revision last")
		most := rapid.IntRange(0, g.n).Draw(t, "limit")
		sameRefusalAtLimit(t, "gen.yaml", g.text(), most)
	})
}
