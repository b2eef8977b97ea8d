package declaration

import (
	"bufio"
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/mesh-host/mesh-host/drivers"
)

// Installation is the host's own installation, which no declaration may
// touch by any path: the host is installed as a package and manages
// everything but itself. Paths are under the root prefix, as a
// declaration's paths are.
type Installation struct {
	// Unit is the host's unit, such as "mesh-host.service". Refused: a
	// unit resource of that name or of its template (mesh-host@….service),
	// another unit whose content makes itself an alias of it or wants it,
	// and a file, directory or archive at any path with an element naming
	// it (unit files, drop-in directories, .wants links) in any directory.
	Unit string
	// Package is the host's package: no package resource may name it,
	// present or absent.
	Package string
	// Paths are the directories and files of the installation (state,
	// configuration, binaries, launcher): no resource writes at or under
	// one, and no archive unpacks over one of their parents, which would
	// replace it.
	Paths []string
	// Versions is the directory of the host's versions: only an archive at
	// Versions/${version}, the form `meshctl release` declares, writes
	// there.
	Versions string
}

// RefuseInstallation returns an error naming the first resource of d that
// touches inst, and where it was declared; it matches ErrOwnUnit (for the
// unit and its files) or ErrOwnInstallation, and ErrInvalid.
func (d *Declaration) RefuseInstallation(inst Installation) error {
	for i, s := range d.Resources {
		if s == nil {
			continue
		}
		field, msg, sentinel := inst.refusal(s)
		if msg == "" {
			continue
		}
		e := &Error{File: d.file, Field: fmt.Sprintf("resources[%d].%s.%s", i, s.Kind(), field), Msg: msg, sentinel: sentinel}
		if at, ok := d.where[drivers.ID(s)]; ok && at.index == i {
			e.Line, e.Column = at.line, at.column
		}
		return e
	}
	return nil
}

// refusal says why s touches the installation: the field, the message and
// the sentinel; an empty message when it does not.
func (inst Installation) refusal(s drivers.Spec) (field, msg string, sentinel error) {
	own := func(what string) string {
		return what + ": the installation manages it, never a declaration"
	}
	switch s := s.(type) {
	case *drivers.UnitSpec:
		if inst.isUnit(s.Name) {
			return "name", own(fmt.Sprintf("%q is the host's own unit", s.Name)), ErrOwnUnit
		}
		if key, name := inst.unitReference(s.Content); key != "" {
			return "content", own(fmt.Sprintf("its %s= names %q, the host's own unit", key, name)), ErrOwnUnit
		}
	case *drivers.PackageSpec:
		if inst.Package != "" && s.Name == inst.Package {
			return "name", own(fmt.Sprintf("%q is the host's own package", s.Name)), ErrOwnInstallation
		}
	case *drivers.FileSpec:
		if f, m, e := inst.pathRefusal(s.Path, false); m != "" {
			return f, m, e
		}
		if inUnitDir(s.Path) {
			if key, name := inst.unitReference(s.Content); key != "" {
				return "content", own(fmt.Sprintf("a unit file whose %s= names %q, the host's own unit", key, name)), ErrOwnUnit
			}
		}
	case *drivers.DirectorySpec:
		return inst.pathRefusal(s.Path, false)
	case *drivers.ArchiveSpec:
		if f, m, e := inst.pathRefusal(s.Path, true); m != "" {
			return f, m, e
		}
		return inst.sourceRefusal(s.Source)
	case *drivers.ExecSpec:
		return inst.execRefusal(s)
	}
	return "", "", nil
}

// execRefusal refuses an exec whose paths lie in the installation, or
// whose argvs name the host's unit, package or installation paths: a
// `systemctl stop mesh-host` or an `rm -r /var/lib/mesh-host`, in a word
// of its own or inside a shell's script. An exec is a command the mesh
// runs as root, so this catches what a declaration says in words, not a
// program that finds the host by other means.
func (inst Installation) execRefusal(s *drivers.ExecSpec) (field, msg string, sentinel error) {
	for _, p := range []struct{ field, path string }{{"creates", s.Creates}, {"cwd", s.Cwd}} {
		if p.path == "" {
			continue
		}
		if _, m, e := inst.pathRefusal(p.path, false); m != "" {
			return p.field, m, e
		}
	}
	for _, argv := range []struct {
		field string
		words []string
	}{{"command", s.Command}, {"unless", s.Unless}, {"onlyif", s.OnlyIf}} {
		for i, w := range argv.words {
			if what, sentinel := inst.named(w); what != "" {
				return fmt.Sprintf("%s[%d]", argv.field, i), fmt.Sprintf("%q names %s: the installation manages it, never a declaration", w, what), sentinel
			}
		}
	}
	return "", "", nil
}

// named says what of the installation a word of an argv names, if
// anything: the host's unit (or its name without the suffix, as
// systemctl takes it), its package, or a path at or under one of its
// paths or its versions. A word is split as a shell would split a
// script, roughly: on space and the shell's operators and quotes.
func (inst Installation) named(word string) (string, error) {
	tokens := strings.FieldsFunc(word, func(r rune) bool {
		return strings.ContainsRune(" \t\n;&|()<>`'\"$={},", r)
	})
	base, _, _ := strings.Cut(inst.Unit, ".")
	for _, t := range tokens {
		unit := inst.Unit != "" && (inst.isUnit(t) || t == base || inst.isUnitFile(path.Base(t)))
		pkg := inst.Package != "" && t == inst.Package
		switch {
		case unit && pkg:
			return fmt.Sprintf("the host's own unit %s and package %s", inst.Unit, inst.Package), ErrOwnUnit
		case unit:
			return fmt.Sprintf("the host's own unit %s", inst.Unit), ErrOwnUnit
		case pkg:
			return fmt.Sprintf("the host's own package %s", inst.Package), ErrOwnInstallation
		}
		if !strings.HasPrefix(t, "/") {
			continue
		}
		p := path.Clean(t)
		for _, q := range append(inst.Paths[:len(inst.Paths):len(inst.Paths)], inst.Versions) {
			if q != "" && (within(p, path.Clean(q)) || within(path.Clean(q), p) && p != "/") {
				return fmt.Sprintf("the host's own %s", path.Clean(q)), ErrOwnInstallation
			}
		}
	}
	return "", nil
}

// pathRefusal checks a resource's path against the installation. An
// archive replaces the whole tree at its path, so it is also refused over
// a parent of the installation; and it alone may write a version.
func (inst Installation) pathRefusal(p string, archive bool) (field, msg string, sentinel error) {
	const field0 = "path"
	p = path.Clean(p)
	own := func(what string) string {
		return what + ": the installation manages it, never a declaration"
	}
	for _, elem := range strings.Split(p, "/") {
		if inst.isUnitFile(elem) {
			return field0, own(fmt.Sprintf("%s names the host's own unit (%s)", p, elem)), ErrOwnUnit
		}
	}
	for _, q := range inst.Paths {
		q = path.Clean(q)
		switch {
		case within(p, q):
			return field0, own(fmt.Sprintf("%s is the host's own %s", p, q)), ErrOwnInstallation
		case archive && within(q, p):
			return field0, own(fmt.Sprintf("an archive at %s would replace the host's own %s", p, q)), ErrOwnInstallation
		}
	}
	if v := inst.Versions; v != "" {
		v = path.Clean(v)
		switch {
		case archive && p == path.Join(v, version):
			// The release archive: a version of its own, by digest.
		case within(p, v):
			return field0, own(fmt.Sprintf("%s is in the host's versions directory %s, where only a release archive (%s/%s) writes", p, v, v, version)), ErrOwnInstallation
		case archive && within(v, p):
			return field0, own(fmt.Sprintf("an archive at %s would replace the host's versions directory %s", p, v)), ErrOwnInstallation
		}
	}
	return "", "", nil
}

// sourceRefusal refuses an archive's file source inside the installation:
// the host's state holds its keys, credentials and journal, and no
// declaration reads them, even as an archive that would fail its digest.
func (inst Installation) sourceRefusal(source string) (field, msg string, sentinel error) {
	u, err := url.Parse(source)
	if err != nil || u.Scheme != "file" {
		return "", "", nil
	}
	p := path.Clean(u.Path)
	for _, q := range append(inst.Paths[:len(inst.Paths):len(inst.Paths)], inst.Versions) {
		if q != "" && within(p, path.Clean(q)) {
			return "source", fmt.Sprintf("%s is in the host's own %s: a declaration never reads the host's installation", p, path.Clean(q)), ErrOwnInstallation
		}
	}
	return "", "", nil
}

// within reports whether p is q or under it.
func within(p, q string) bool {
	return p == q || q == "/" || strings.HasPrefix(p, q+"/")
}

// isUnit reports whether name is the host's unit or an instance or the
// template of it.
func (inst Installation) isUnit(name string) bool {
	if inst.Unit == "" {
		return false
	}
	if name == inst.Unit {
		return true
	}
	base, suffix, ok := strings.Cut(inst.Unit, ".")
	if !ok {
		return false
	}
	prefix, rest, templated := strings.Cut(name, "@")
	return templated && prefix == base && strings.HasSuffix(rest, "."+suffix)
}

// isUnitFile reports whether a path element is a unit file or drop-in
// directory of the host's unit.
func (inst Installation) isUnitFile(elem string) bool {
	return inst.isUnit(elem) || inst.isUnit(strings.TrimSuffix(elem, ".d")) && strings.HasSuffix(elem, ".d")
}

// unitReference finds, in a unit file's content, a directive that makes
// the unit an alias of the host's, or ties it to the host's: starting or
// stopping it with the host would be the declaration managing the host.
func (inst Installation) unitReference(content string) (key, name string) {
	if inst.Unit == "" {
		return "", ""
	}
	sc := bufio.NewScanner(strings.NewReader(content))
	sc.Buffer(nil, len(content)+1)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		k = strings.TrimSpace(k)
		switch k {
		case "Alias", "WantedBy", "RequiredBy", "UpheldBy", "Also", "PartOf", "BindsTo", "Requires", "Wants", "Conflicts", "Upholds", "PropagatesStopTo", "PropagatesReloadTo", "StopPropagatedFrom", "ReloadPropagatedFrom", "OnSuccess", "OnFailure", "Requisite":
		default:
			continue
		}
		for _, n := range strings.Fields(v) {
			if inst.isUnit(n) {
				return k, n
			}
		}
	}
	return "", ""
}

// inUnitDir reports whether p is in one of systemd's unit directories,
// where a file is a unit.
func inUnitDir(p string) bool {
	for _, dir := range []string{"/etc/systemd", "/run/systemd", "/usr/lib/systemd", "/lib/systemd", "/usr/local/lib/systemd"} {
		if within(p, dir) {
			return true
		}
	}
	return false
}
