package declaration_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/declaration/declarationtest"
	"github.com/mesh-host/mesh-host/drivers"
)

// childFile, in the environment, makes TestParseChild read and parse that
// file: the benchmark below measures a process that does nothing else.
const childFile = "MESH_HOST_PARSE_CHILD"

// TestParseChild is the child of BenchmarkParsePeakRSS; run on its own, it
// does nothing.
func TestParseChild(t *testing.T) {
	name := os.Getenv(childFile)
	if name == "" {
		t.Skip("the child of BenchmarkParsePeakRSS")
	}
	// The child's own peak, from /proc: its rusage would not do, since
	// Linux counts in a child's ru_maxrss the peak of the address space it
	// replaced at exec, which Go's vfork-style spawn shares with the
	// parent: every child would report the benchmark's own peak.
	defer func() {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(string(status), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				fmt.Println(line)
			}
		}
	}()
	if name == "-" {
		return // the baseline: a test binary that parses nothing
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d, err := declaration.Read(name, f)
	if want := os.Getenv(childFile + "_WANT"); want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
		t.Fatalf("got %.300v, want %q", err, want)
	}
	if d != nil {
		fmt.Println(len(d.Resources), "resources")
	}
}

// BenchmarkParsePeakRSS parses a declaration at the limits, as YAML and as
// JSON, in a child process, and reports the child's peak resident set: the
// memory a host needs to take the largest declaration it accepts. The
// baseline is the same child parsing nothing; "refused" is a file of a
// million resources (the size that took 4.2 GB before there were limits),
// refused after reading MaxBytes+1 of it; "syntax-error-at-end" is a
// document under MaxBytes whose last line is wrong, which the parser places
// by parsing ever shorter prefixes of it.
//
//	go test -run '^$' -bench ParsePeakRSS -benchtime 5x ./declaration/
func BenchmarkParsePeakRSS(b *testing.B) {
	dir := b.TempDir()
	var yaml strings.Builder
	yaml.WriteString("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n")
	var million strings.Builder
	million.WriteString(yaml.String())
	for i := range 1_000_000 {
		fmt.Fprintf(&million, "  - package: {name: p%d}\n", i)
	}
	files := []struct{ name, data, want string }{
		{"baseline", "", ""},
		{"maximal.json", mustJSON(b, declarationtest.Maximal("lab", "web-1", 1)), ""},
		{"maximal.yaml", maximalYAML(b, declarationtest.Maximal("lab", "web-1", 1)), ""},
		{"most-expanded.json", mustJSON(b, declarationtest.MostExpanded("lab", "web-1", 1)), ""},
		{"refused-million.yaml", million.String(), "over the limit for a declaration"},
		{"syntax-error-at-end.yaml", syntaxErrorAtEnd(), "invalid YAML"},
	}
	for _, f := range files {
		b.Run(f.name, func(b *testing.B) {
			path := "-"
			if f.data != "" {
				path = filepath.Join(dir, f.name)
				if err := os.WriteFile(path, []byte(f.data), 0o644); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(len(f.data))/(1<<20), "input-MB")
			}
			var peak int64
			var took time.Duration
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "-test.run", "^TestParseChild$", "-test.count", "1")
				cmd.Env = append(os.Environ(), childFile+"="+path, childFile+"_WANT="+f.want)
				start := time.Now()
				out, err := cmd.CombinedOutput()
				if err != nil {
					b.Fatalf("child: %v\n%s", err, out)
				}
				took += time.Since(start)
				m := vmHWM.FindSubmatch(out)
				if m == nil {
					b.Fatalf("the child did not say its peak:\n%s", out)
				}
				kib, _ := strconv.ParseInt(string(m[1]), 10, 64)
				peak = max(peak, kib)
			}
			b.ReportMetric(float64(peak)/1024, "peak-RSS-MB")
			b.ReportMetric(took.Seconds()*1000/float64(b.N), "child-ms/op")
		})
	}
}

var vmHWM = regexp.MustCompile(`VmHWM:\s+(\d+) kB`)

// maximalYAML writes d as a person might: one resource a line, a flow
// mapping with bare keys, so that the YAML parser is measured and not only
// its JSON subset. The last file's content is cut so that the YAML is
// MaxBytes at most.
func maximalYAML(b *testing.B, d *declaration.Declaration) string {
	bareKey := regexp.MustCompile(`"([a-z_]+)":`)
	write := func() string {
		var y strings.Builder
		fmt.Fprintf(&y, "mesh: %s\nnode: %s\nrevision: %d\nresources:\n", d.Mesh, d.Node, d.Revision)
		for _, r := range d.Resources {
			j, err := json.Marshal(map[drivers.Kind]drivers.Spec{r.Kind(): r})
			if err != nil {
				b.Fatal(err)
			}
			y.WriteString("- " + bareKey.ReplaceAllString(string(j), "$1: ") + "\n")
		}
		return y.String()
	}
	y := write()
	if over := len(y) - declaration.MaxBytes; over > 0 {
		fill := d.Resources[len(d.Resources)-1].(*drivers.FileSpec)
		fill.Content = fill.Content[over:]
		y = write()
	}
	return y
}

func mustJSON(b *testing.B, d *declaration.Declaration) string {
	j, err := d.MarshalJSON()
	if err != nil {
		b.Fatal(err)
	}
	return string(j)
}

// syntaxErrorAtEnd is a document just under MaxBytes with a string left
// unclosed on its last line.
func syntaxErrorAtEnd() string {
	var b strings.Builder
	b.WriteString("mesh: lab\nnode: web-1\nrevision: 1\nresources:\n")
	for i := 0; b.Len() < declaration.MaxBytes-100; i++ {
		fmt.Fprintf(&b, "  - package: {name: p%d}\n", i)
	}
	b.WriteString("  - package: {name: \"x}\n")
	return b.String()
}

// TestRefusalInBoundedMemory: a declaration of 300,000 one-line resources,
// over MaxResources, is refused when the limit is crossed, in every form
// the parser takes, by a process whose peak resident set stays under
// 64 MiB: it never holds the whole document's tree.
func TestRefusalInBoundedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("parses 300,000 resources in a child, in five forms")
	}
	const n = 300_000
	head := "mesh: lab\nnode: web-1\nrevision: 1\n"
	var block, flow, json strings.Builder
	block.WriteString(head + "resources:\n")
	flow.WriteString(head + "resources: [\n")
	json.WriteString(`{"mesh": "lab", "node": "web-1", "revision": 1, "resources": [`)
	for i := range n {
		fmt.Fprintf(&block, "  - package: {name: p%d}\n", i)
		sep := ",\n"
		if i == n-1 {
			sep = "\n]\n"
		}
		fmt.Fprintf(&flow, "  {package: {name: p%d}}%s", i, sep)
		if i > 0 {
			json.WriteString(", ")
		}
		fmt.Fprintf(&json, `{"package": {"name": "p%d"}}`, i)
	}
	json.WriteString("]}")
	dir := t.TempDir()
	want := fmt.Sprintf("resources[%d]: one resource more than the limit of resources in a declaration: %d", declaration.MaxResources, declaration.MaxResources)
	for _, f := range []struct{ name, data string }{
		{"block.yaml", block.String()},
		{"flow.yaml", flow.String()},
		{"json.json", json.String()},
		{"json-as-yaml.yaml", json.String()},
	} {
		path := filepath.Join(dir, f.name)
		if err := os.WriteFile(path, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestParseChild$", "-test.count", "1")
		cmd.Env = append(os.Environ(), childFile+"="+path, childFile+"_WANT="+want)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: child: %v\n%s", f.name, err, out)
		}
		m := vmHWM.FindSubmatch(out)
		if m == nil {
			t.Fatalf("%s: the child did not say its peak:\n%s", f.name, out)
		}
		kib, _ := strconv.ParseInt(string(m[1]), 10, 64)
		t.Logf("%s: %.1f MB, refused at a peak RSS of %.1f MiB", f.name, float64(len(f.data))/1e6, float64(kib)/1024)
		if kib > 64<<10 {
			t.Errorf("%s: refusing %d resources took a peak RSS of %d KiB, over 64 MiB", f.name, n, kib)
		}
	}
}
