// Package meshhost_test holds the checks on the repository's shape: the
// dependency direction STYLE.md fixes, and a doc comment in every package.
// There is no code at the top of the tree; it lives in the packages below.
package meshhost_test

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mesh-host/mesh-host"

type pkg struct {
	ImportPath string
	Dir        string
	Doc        string
	Name       string
	GoFiles    []string
	Imports    []string
	Deps       []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json", "-deps=false", "./...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if len(p.GoFiles) > 0 {
			pkgs = append(pkgs, p)
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

func rel(importPath string) string {
	if importPath == module {
		return "."
	}
	return strings.TrimPrefix(importPath, module+"/")
}

// internalDeps are the module's own packages p imports, directly or not.
func internalDeps(p pkg) []string {
	var out []string
	for _, d := range p.Deps {
		if strings.HasPrefix(d, module+"/") {
			out = append(out, rel(d))
		}
	}
	return out
}

// TestDependencyDirection enforces the arrows of STYLE.md.
func TestDependencyDirection(t *testing.T) {
	allowed := func(path string) (list []string, constrained bool) {
		switch {
		case path == "journal/event", path == "drivers", path == "upgrade", path == "sealing", path == "labels",
			path == "internal/basetest": // the tests' shared helpers: a leaf, so any package's tests may use it
			return nil, true
		case path == "journal", path == "projector":
			return []string{"journal/event"}, true
		case path == "declaration":
			return []string{"drivers"}, true
		case path == "profile":
			// Rendering is pure: the declaration's rules, labels, facts.
			return []string{"declaration", "drivers", "labels", "journal/event"}, true
		case path == "linkproto":
			return []string{"journal/event", "projector"}, true
		case path == "cmd/meshctl/authority":
			// Files and keys: below every other meshctl package.
			return []string{"cmd/internal/atomicfile", "linkproto", "journal/event", "projector", "drivers", "sealing"}, true
		case path == "cmd/meshctl/broker":
			// The embedded server is told the authority, and nothing else
			// of the control plane.
			return []string{"cmd/meshctl/authority", "cmd/internal/atomicfile", "linkproto", "journal/event", "projector", "drivers", "sealing"}, true
		case path == "cmd/meshctl/rollout":
			// What a rollout is; no I/O, nothing of the control plane.
			return []string{"linkproto", "journal/event", "projector", "drivers", "labels"}, true
		case path == "cmd/internal/fanout":
			return nil, true
		case path == "cmd/meshctl/store":
			// The buckets and streams and their records: below the service
			// and the client, above nothing of the control plane.
			return []string{"cmd/meshctl/rollout", "linkproto", "journal/event", "projector", "declaration", "drivers", "profile", "labels"}, true
		case path == "drivers/rootfs":
			// The confined filesystem wraps drivers' errors and takes
			// its modes; drivers never imports it.
			return []string{"drivers"}, true
		case strings.HasPrefix(path, "drivers/") && path != "drivers/driverstest":
			return []string{"drivers", "drivers/rootfs"}, true
		}
		return nil, false
	}
	// The services are told what to do by package main, which holds the
	// grammar (kong) and the shell's completions: a service that reached
	// for them would be deciding. The parts a service runs stay below it.
	const (
		kong       = "github.com/alecthomas/kong"
		completion = "cmd/internal/completion"
		hostSvc    = "cmd/mesh-host/service"
	)
	whyForbidden := map[string]string{
		kong:       "a service is told its configuration; package main holds the grammar",
		completion: "a service is told its configuration; package main holds the command line",
		hostSvc:    "the parts the host service runs do not know it",
	}
	forbidden := func(path string) []string {
		switch path {
		case "cmd/meshctl/client", "cmd/meshctl/nodeservice", "cmd/meshctl/web", "cmd/meshctl/authority", "cmd/meshctl/broker", "cmd/meshctl/store", "cmd/meshctl/rollout", "cmd/internal/fanout", "cmd/internal/fleetview", hostSvc:
			return []string{kong, completion}
		case "cmd/mesh-host/agent", "cmd/mesh-host/link", "cmd/mesh-host/localsock",
			"cmd/mesh-host/hostjournal", "cmd/mesh-host/enrolment", "cmd/mesh-host/facts", "cmd/mesh-host/hostmetrics":
			return []string{hostSvc, kong, completion}
		}
		return nil
	}
	for _, p := range listPackages(t) {
		path := rel(p.ImportPath)
		for _, d := range internalDeps(p) {
			if strings.HasPrefix(d, "cmd/") && !strings.HasPrefix(path, "cmd/") && path != "testbeds" && !strings.HasPrefix(path, "testbeds/") {
				t.Errorf("%s imports %s: only cmd/... and testbeds wire packages together", path, d)
			}
			if strings.HasPrefix(d, "testbeds") && path != "testbeds" && !strings.HasPrefix(path, "testbeds/") {
				t.Errorf("%s imports %s: no production package imports the beds", path, d)
			}
		}
		if slices.Contains(p.Imports, "testing") && p.Name != "driverstest" && !strings.HasSuffix(path, "test") {
			t.Errorf("%s imports testing in a production file", path)
		}
		for _, d := range p.Deps {
			for _, f := range forbidden(path) {
				if rel(d) == f || d == f {
					t.Errorf("%s imports %s: %s", path, f, whyForbidden[f])
				}
			}
		}
		list, constrained := allowed(path)
		if !constrained {
			continue
		}
		for _, d := range internalDeps(p) {
			if !slices.Contains(list, d) {
				t.Errorf("%s imports %s; it may import only %v", path, d, list)
			}
		}
	}
}

// TestProjectorDoesNoIO: the projector is pure folds.
func TestProjectorDoesNoIO(t *testing.T) {
	forbidden := []string{"os", "os/exec", "net", "net/http", "io/fs", "syscall", "path/filepath"}
	for _, p := range listPackages(t) {
		if rel(p.ImportPath) != "projector" {
			continue
		}
		for _, imp := range p.Imports {
			if slices.Contains(forbidden, imp) {
				t.Errorf("projector imports %s: it must do no I/O", imp)
			}
		}
		for _, f := range p.GoFiles {
			b, err := os.ReadFile(filepath.Join(p.Dir, f))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "time.Now") {
				t.Errorf("projector/%s reads the clock: times come from records", f)
			}
		}
		return
	}
	t.Fatal("no projector package found")
}

// TestHostDoesNotLinkBroker: only meshctl and the beds embed the NATS server.
func TestHostDoesNotLinkBroker(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/mesh-host").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/nats-io/nats-server") {
			t.Errorf("mesh-host links %s", d)
		}
	}
}

// TestSpecsLinkNoFilesystem: what only names a spec (a declaration, a
// profile, the link's messages, the drivers' vocabulary) links neither the
// confined filesystem nor the system calls it makes, so that the control
// plane and the parsers do not carry them.
func TestSpecsLinkNoFilesystem(t *testing.T) {
	forbidden := []string{"golang.org/x/sys/unix", module + "/drivers/rootfs"}
	for _, p := range []string{"declaration", "profile", "linkproto", "drivers"} {
		out, err := exec.Command("go", "list", "-deps", "./"+p).Output()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v", p, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) == 0 {
			t.Fatalf("go list -deps ./%s listed nothing", p)
		}
		for _, f := range forbidden {
			if slices.Contains(deps, f) {
				t.Errorf("%s depends on %s: a spec is named without the filesystem", p, rel(f))
			}
		}
	}
}

// TestNothingBelowImportsTheClient: the operator's client is used by
// package main (and the views it prints with); the service, the store,
// the rollout records, the broker and the authority are below it.
func TestNothingBelowImportsTheClient(t *testing.T) {
	below := []string{"cmd/meshctl/nodeservice", "cmd/meshctl/store", "cmd/meshctl/rollout", "cmd/meshctl/broker", "cmd/meshctl/authority", "cmd/internal/fanout"}
	for _, p := range listPackages(t) {
		path := rel(p.ImportPath)
		if !slices.Contains(below, path) {
			continue
		}
		for _, d := range internalDeps(p) {
			if d == "cmd/meshctl/client" || d == "cmd/meshctl" {
				t.Errorf("%s imports %s", path, d)
			}
		}
	}
}

// TestAuthorityLinksNoNATS: the authority is files and keys; what talks to
// a broker is told an authority, never the other way round.
func TestAuthorityLinksNoNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./cmd/meshctl/authority").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, d := range strings.Fields(string(out)) {
		if strings.HasPrefix(d, "github.com/nats-io/nats.go") || strings.HasPrefix(d, "github.com/nats-io/nats-server") {
			t.Errorf("cmd/meshctl/authority links %s", d)
		}
		if strings.HasPrefix(d, module+"/cmd/") && d != module+"/cmd/meshctl/authority" && d != module+"/cmd/internal/atomicfile" {
			t.Errorf("cmd/meshctl/authority imports %s: it is below every other meshctl package", rel(d))
		}
	}
}

// TestEveryPackageHasDoc: each package says what it is for.
func TestEveryPackageHasDoc(t *testing.T) {
	for _, p := range listPackages(t) {
		if strings.TrimSpace(p.Doc) == "" {
			t.Errorf("%s has no package doc comment", rel(p.ImportPath))
		}
	}
}
