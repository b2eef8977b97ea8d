package fleetmetrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/linkproto"
)

// docsDir is the repository's docs, from this package's directory.
var docsDir = filepath.Join("..", "..", "..", "docs")

// metricName finds the series names a PromQL expression or a page names.
var metricName = regexp.MustCompile(`\bmesh_[a-z0-9_]+`)

// sections splits docs/metrics.md at its "## " headings: heading to text.
func sections(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docsDir, "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	heading := ""
	for line := range strings.Lines(string(b)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			heading = strings.TrimSpace(h)
			continue
		}
		out[heading] += line
	}
	return out
}

const controlSection = "The control plane (meshctl serve --http-listen: /metrics)"

// documented says whether name, or the histogram it is a part of, is
// named in text.
func documented(text, name string) bool {
	names := map[string]bool{}
	for _, n := range metricName.FindAllString(text, -1) {
		names[n] = true
	}
	if names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// The sample dashboard is valid JSON, and every series its expressions
// use is one docs/metrics.md lists: the fleet's in this package's section,
// the host's in the host's section.
func TestDashboardUsesDocumentedSeries(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(docsDir, "grafana", "mesh-fleet.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string           `json:"title"`
		Panels []map[string]any `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("mesh-fleet.json: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) == 0 {
		t.Fatal("mesh-fleet.json: no title or no panels")
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var all any
	_ = json.Unmarshal(b, &all)
	walk(all)
	if len(exprs) < 20 {
		t.Fatalf("%d expressions found in the dashboard; the walk missed them", len(exprs))
	}
	docs := sections(t)
	host := ""
	for h, text := range docs {
		if strings.HasPrefix(h, "The host") {
			host = text
		}
	}
	if host == "" {
		t.Fatal("docs/metrics.md has no section on the host's series (## The host …)")
	}
	for _, e := range exprs {
		for _, name := range metricName.FindAllString(e, -1) {
			section, which := docs[controlSection], "the control plane's"
			if strings.HasPrefix(name, "mesh_host_") {
				section, which = host, "the host's"
			}
			if !documented(section, name) {
				t.Errorf("the dashboard uses %s (%s); %s section of docs/metrics.md does not list it", name, e, which)
			}
		}
	}
}

// Every series the registry serves with a mesh_ name is listed in the
// control plane's section of docs/metrics.md, and has HELP (scrape).
func TestEverySeriesDocumented(t *testing.T) {
	b := newBed(t)
	b.heartbeat(linkproto.Heartbeat{Node: "web-1", Version: "v1", Sent: time.Now()})
	b.heartbeatsStored(1)
	m := b.metrics(Config{})
	m.Enrolled(true)
	text := sections(t)[controlSection]
	for name := range scrape(t, m.Registry()) {
		if strings.HasPrefix(name, "mesh_") && !documented(text, name) {
			t.Errorf("%s is served; docs/metrics.md does not list it", name)
		}
	}
}
