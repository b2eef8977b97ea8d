package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/packaging"
)

// installation is the host's own installation as a declaration's paths
// name it (under --root): one list, derived here from the configuration,
// that admission checks for every resource kind. It holds where the
// package and the tarball install (state, configuration, binaries, the
// launcher, the unit), and this host's own state directory and executable
// when they lie under the root.
func (e *env) installation() declaration.Installation {
	inst := declaration.Installation{
		Unit:     e.cli.OwnUnit,
		Package:  packaging.PackageName,
		Versions: e.cli.Versions,
		Paths:    packaging.InstalledPaths(),
	}
	for _, p := range []string{e.stateDir(), executable()} {
		if rel, ok := underRoot(e.cli.Root, p); ok {
			inst.Paths = append(inst.Paths, rel)
		}
	}
	return inst
}

// executable is this process's executable, "" when it cannot be known.
func executable() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	return p
}

// underRoot returns p as a declaration would name it, when p is under
// root.
func underRoot(root, p string) (string, bool) {
	if p == "" {
		return "", false
	}
	r, err1 := filepath.Abs(root)
	a, err2 := filepath.Abs(p)
	if err1 != nil || err2 != nil {
		return "", false
	}
	rel, err := filepath.Rel(r, a)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	if rel == "." {
		return "/", true
	}
	return "/" + filepath.ToSlash(rel), true
}
