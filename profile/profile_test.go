package profile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/mesh-host/mesh-host/labels"
	"github.com/mesh-host/mesh-host/profile"
)

func mustParse(t testing.TB, name, selector string, priority int, source string) *profile.Parsed {
	t.Helper()
	p, err := profile.Parse(profile.Profile{Name: name, Selector: selector, Priority: priority, File: name + ".yaml", Source: source})
	if err != nil {
		t.Fatalf("parse %s: %v", name, err)
	}
	return p
}

var web1 = profile.Node{Mesh: "home", Name: "web-1",
	Labels: labels.Set{"role": "web", "dc": "fra", "port": "9090"},
	Facts:  map[string]string{"hostname": "web-1.fra", "cores": "8"}}

func TestRender(t *testing.T) {
	base := mustParse(t, "base", "", 10, `
resources:
  - package: {name: chrony}
  - file: {path: /etc/motd, content: "${node} in ${mesh}, ${fact.cores} cores\n"}
`)
	web := mustParse(t, "web", "role=web", 50, `
vars:
  port: "8080"
  level: info
resources:
  - file:
      path: /etc/app/${label.dc}.conf
      content: "listen ${port} log ${level} on ${fact.hostname}\n"
  - package: {name: chrony}
  - archive: {path: "/srv/app/${version}", source: "file:///srv/app.tgz", digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000", format: tar.gz}
`)
	db := mustParse(t, "db", "role=db", 0, `
resources:
  - package: {name: postgresql}
`)
	// Only then does the control plane read the node's facts.
	if !base.UsesFacts() || !web.UsesFacts() || db.UsesFacts() {
		t.Errorf("UsesFacts: base %v, web %v, db %v; want true, true, false", base.UsesFacts(), web.UsesFacts(), db.UsesFacts())
	}
	d, names, err := profile.Render(web1, []*profile.Parsed{web, db, base}, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(names, ","); got != "base,web" {
		t.Errorf("profiles used %s, want base,web", got)
	}
	doc, _ := d.MarshalJSON()
	want := `{"mesh":"home","node":"web-1","revision":7,"resources":[` +
		`{"package":{"name":"chrony","state":"present"}},` +
		`{"file":{"path":"/etc/motd","content":"web-1 in home, 8 cores\n"}},` +
		// The node's label port overrides the profile's var.
		`{"file":{"path":"/etc/app/fra.conf","content":"listen 9090 log info on web-1.fra\n"}},` +
		`{"archive":{"path":"/srv/app/${version}","source":"file:///srv/app.tgz","digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000","format":"tar.gz"}}]}`
	if string(doc) != want {
		t.Errorf("rendered\n%s\nwant\n%s", doc, want)
	}
}

func TestNoProfileSelects(t *testing.T) {
	db := mustParse(t, "db", "role=db", 0, "resources:\n  - package: {name: postgresql}\n")
	if _, _, err := profile.Render(web1, []*profile.Parsed{db}, 1); !errors.Is(err, profile.ErrNoProfile) {
		t.Fatalf("render with no profile selecting the node: %v, want ErrNoProfile", err)
	}
}

// Goldens: each refusal names the file, the line and column, and what is
// wrong.
func TestRefused(t *testing.T) {
	cases := []struct {
		name, source, selector string
		render                 []string // other profiles' sources, rendered with this one
		want                   string
	}{
		{name: "unknown variable", source: "resources:\n  - file: {path: /etc/a, content: \"x ${colour}\"}\n",
			want: "p.yaml:2:38: unknown variable ${colour}: use ${node}, ${mesh}, ${label.KEY}, ${fact.KEY} or a name from vars"},
		{name: "unknown namespace", source: "resources:\n  - file:\n      path: /etc/${env.HOME}\n      content: x\n",
			want: "p.yaml:3:18: unknown variable ${env.HOME}"},
		{name: "unknown fact", source: "resources:\n  - file: {path: /etc/a, content: \"${fact.colour}\"}\n",
			want: "p.yaml:2:36: ${fact.colour}: unknown fact"},
		{name: "escapes before it", source: "resources:\n  - file: {path: /etc/a, content: \"a\\tb\\x41\\u00e9 ${fact.colour}\\n\"}\n",
			want: "p.yaml:2:51: ${fact.colour}: unknown fact"},
		{name: "single quotes", source: "resources:\n  - file: {path: /etc/a, content: 'it''s ${colour}'}\n",
			want: "p.yaml:2:42: unknown variable ${colour}"},
		{name: "over lines", source: "resources:\n  - file: {path: /etc/a, content: \"a\n      b ${colour}\"}\n",
			want: "p.yaml:2:35: unknown variable ${colour}"},
		{name: "names a node", source: "node: web-1\nresources: []\n",
			want: "p.yaml:1:1: node: a profile names no node"},
		{name: "unknown field", source: "resource: []\n",
			want: "p.yaml:1:1: resource: unknown field (known: vars, resources)"},
		{name: "no resources", source: "vars: {a: b}\n",
			want: "p.yaml:1:1: resources: required field is missing"},
		{name: "reserved var", source: "vars: {node: x}\nresources: []\n",
			want: "p.yaml:1:8: vars.node: \"node\" is reserved"},
		{name: "var in var", source: "vars: {a: \"${node}\"}\nresources: []\n",
			want: "p.yaml:1:11: vars.a: a variable's value cannot refer to another variable"},
		{name: "bad selector", source: "resources: []\n", selector: "role in (web",
			want: "profile p: selector:"},
		{name: "missing label", source: "resources:\n  - file: {path: \"/etc/${label.team}\", content: x}\n",
			render: []string{}, want: "p.yaml:2:24: ${label.team}: node web-1 has no label team"},
		{name: "declaration rule", source: "resources:\n  - file: {path: \"etc/${node}\", content: x}\n",
			render: []string{}, want: "p.yaml:2:18: resources[0].file.path: \"etc/web-1\" is not absolute"},
		{name: "conflict", source: "resources:\n  - package: {name: nginx}\n  - file: {path: /etc/motd, content: \"b\", mode: \"0644\"}\n",
			render: []string{"resources:\n  - file: {path: /etc/motd, content: \"a\", mode: \"0644\"}\n"},
			want:   "p.yaml:3:5: resources[1].file.content: profiles o0 (o0.yaml:2) and p both declare file:/etc/motd, differently"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := profile.Parse(profile.Profile{Name: "p", Selector: c.selector, Priority: 50, File: "p.yaml", Source: c.source})
			if err == nil && c.render != nil {
				all := []*profile.Parsed{p}
				for i, src := range c.render {
					all = append(all, mustParse(t, fmt.Sprintf("o%d", i), "", 0, src))
				}
				_, _, err = profile.Render(web1, all, 1)
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant it to hold %q", err, c.want)
			}
		})
	}
}

// genProfiles makes profiles from a small pool of resources, so that some
// declare the same resource, alike or not.
func genProfiles(t *rapid.T) []*profile.Parsed {
	n := rapid.IntRange(1, 6).Draw(t, "profiles")
	var out []*profile.Parsed
	for i := range n {
		var src strings.Builder
		src.WriteString("vars: {v: \"" + rapid.SampledFrom([]string{"a", "b"}).Draw(t, "var") + "\"}\nresources:\n")
		count := rapid.IntRange(0, 4).Draw(t, "resources")
		if count == 0 {
			src.WriteString("  []\n")
		}
		// One profile declares a path once; two may share it.
		paths := rapid.Permutation([]string{"/etc/a", "/etc/b", "/etc/c", "/etc/${node}"}).Draw(t, "paths")
		for _, path := range paths[:count] {
			content := rapid.SampledFrom([]string{"x", "y", "${v}", "${label.role}"}).Draw(t, "content")
			fmt.Fprintf(&src, "  - file: {path: %q, content: %q}\n", path, content)
		}
		sel := rapid.SampledFrom([]string{"", "role=web", "role=db", "!canary"}).Draw(t, "selector")
		prio := rapid.IntRange(0, 3).Draw(t, "priority")
		p, err := profile.Parse(profile.Profile{Name: fmt.Sprintf("p%d", i), Selector: sel, Priority: prio, Source: src.String()})
		if err != nil {
			t.Fatalf("generated profile refused: %v\n%s", err, src.String())
		}
		out = append(out, p)
	}
	return out
}

// Rendering depends on the profiles, never on the order they are given
// in: the same document, byte for byte, or the same refusal.
func TestRenderIsOrderIndependent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := genProfiles(t)
		d1, _, err1 := profile.Render(web1, ps, 3)
		shuffled := rapid.Permutation(ps).Draw(t, "order")
		d2, _, err2 := profile.Render(web1, shuffled, 3)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("one order renders (%v), another does not (%v)", err1, err2)
		}
		if err1 != nil {
			if err1.Error() != err2.Error() {
				t.Fatalf("refusals differ by order:\n%v\n%v", err1, err2)
			}
			return
		}
		if d1.Digest() != d2.Digest() {
			t.Fatalf("digests differ by order")
		}
	})
}

// Two selected profiles that declare one resource differently are refused,
// whatever their priorities; alike, the resource is declared once.
func TestConflictsAreRefused(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ps := genProfiles(t)
		seen := map[string]string{}
		conflict := false
		for _, p := range ps {
			if !p.Selects(web1.Labels) {
				continue
			}
			d, _, err := profile.Render(web1, []*profile.Parsed{p}, 1)
			if err != nil {
				if errors.Is(err, profile.ErrNoProfile) {
					continue
				}
				t.Fatalf("one profile alone refused: %v", err)
			}
			for _, r := range d.Resources {
				id := fmt.Sprint(r.Kind(), ":", r.Key())
				content := fmt.Sprintf("%+v", r)
				if prev, ok := seen[id]; ok && prev != content {
					conflict = true
				}
				seen[id] = content
			}
		}
		d, _, err := profile.Render(web1, ps, 1)
		switch {
		case conflict && (err == nil || !strings.Contains(err.Error(), "both declare")):
			t.Fatalf("a conflict rendered: %v", err)
		case !conflict && len(seen) > 0 && err != nil:
			t.Fatalf("no conflict, yet refused: %v", err)
		case !conflict && err == nil && len(d.Resources) != len(seen):
			t.Fatalf("%d resources rendered, %d distinct declared", len(d.Resources), len(seen))
		}
	})
}
