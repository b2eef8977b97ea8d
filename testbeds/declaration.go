package testbeds

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Mesh is the name every bed's control service is initialised with.
const Mesh = "home"

// Files is a declaration's files: path under the root → content.
type Files map[string]string

// Declare writes a declaration of files (and the directories above them,
// which the host does not create by itself) for node at revision rev, and
// returns its path. extra are more resources, as YAML list items (a
// Release's ArchiveYAML).
func (b *Bed) Declare(node string, rev uint64, files Files, extra ...string) string {
	b.tb.Helper()
	path := filepath.Join(b.Dir, fmt.Sprintf("%s-r%d.yaml", node, rev))
	doc := DeclarationYAML(Mesh, node, rev, files) + strings.Join(extra, "")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		b.tb.Fatalf("%v", err)
	}
	return path
}

// DeclarationYAML renders a declaration of files, parents first.
func DeclarationYAML(mesh, node string, rev uint64, files Files) string {
	var s strings.Builder
	fmt.Fprintf(&s, "mesh: %s\nnode: %s\nrevision: %d\nresources:\n", mesh, node, rev)
	dirs := map[string]bool{}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
		for d := filepath.Dir(p); d != "/" && d != "/etc"; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	sort.Strings(paths)
	ds := make([]string, 0, len(dirs))
	for d := range dirs {
		ds = append(ds, d)
	}
	sort.Strings(ds) // a parent sorts before its children
	for _, d := range ds {
		fmt.Fprintf(&s, "  - directory: {path: %s}\n", d)
	}
	for _, p := range paths {
		fmt.Fprintf(&s, "  - file: {path: %s, content: %q}\n", p, files[p])
	}
	return s.String()
}
