package declaration_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
)

var testInstallation = declaration.Installation{
	Unit:     "mesh-host.service",
	Package:  "mesh-host",
	Versions: "/opt/mesh-host/versions",
	Paths:    []string{"/var/lib/mesh-host", "/etc/mesh-host", "/usr/lib/mesh-host", "/usr/bin/mesh-host"},
}

// TestInstallationIsUntouchable is the hostile corpus of the host's own
// installation, by every resource kind: each is refused, naming the
// resource's field and the part of the installation it touches.
func TestInstallationIsUntouchable(t *testing.T) {
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	archive := func(p string) string {
		return `archive: {path: "` + p + `", source: "https://x/a.tar", digest: "` + digest + `", format: tar}`
	}
	unitFile := "[Unit]\nDescription=x\n[Install]\n"
	for _, c := range []struct {
		name, resource string
		sentinel       error
		want           string
	}{
		{"the unit", `unit: {name: mesh-host.service, content: "x"}`, declaration.ErrOwnUnit, `"mesh-host.service" is the host's own unit`},
		{"its template", `unit: {name: mesh-host@.service, content: "x"}`, declaration.ErrOwnUnit, "own unit"},
		{"an instance of it", `unit: {name: mesh-host@x.service, content: "x"}`, declaration.ErrOwnUnit, "own unit"},
		{"an alias of it", `unit: {name: other.service, content: "` + strings.ReplaceAll(unitFile, "\n", `\n`) + `Alias=mesh-host.service\n"}`, declaration.ErrOwnUnit, "Alias= names"},
		{"a unit wanted by it", `unit: {name: other.service, content: "[Install]\nWantedBy=mesh-host.service\n"}`, declaration.ErrOwnUnit, "WantedBy= names"},
		{"a unit conflicting with it", `unit: {name: other.service, content: "[Unit]\nConflicts=mesh-host.service\n"}`, declaration.ErrOwnUnit, "Conflicts= names"},
		{"its unit file in /etc", `file: {path: /etc/systemd/system/mesh-host.service, content: x}`, declaration.ErrOwnUnit, "names the host's own unit"},
		{"its unit file in /usr/lib", `file: {path: /usr/lib/systemd/system/mesh-host.service, content: x}`, declaration.ErrOwnUnit, "own unit"},
		{"a drop-in", `file: {path: /etc/systemd/system/mesh-host.service.d/override.conf, content: x}`, declaration.ErrOwnUnit, "mesh-host.service.d"},
		{"the drop-in directory", `directory: {path: /etc/systemd/system/mesh-host.service.d}`, declaration.ErrOwnUnit, "own unit"},
		{"a template file", `file: {path: /etc/systemd/system/mesh-host@.service, content: x}`, declaration.ErrOwnUnit, "own unit"},
		{"a wants link", `file: {path: /etc/systemd/system/multi-user.target.wants/mesh-host.service, content: x}`, declaration.ErrOwnUnit, "own unit"},
		{"another unit file aliasing it", `file: {path: /etc/systemd/system/evil.service, content: "[Install]\nAlias=mesh-host.service\n"}`, declaration.ErrOwnUnit, "Alias= names"},
		{"the journal", `file: {path: /var/lib/mesh-host/journal.db, content: x}`, declaration.ErrOwnInstallation, "host's own /var/lib/mesh-host"},
		{"its credentials", `file: {path: /var/lib/mesh-host/node.creds, content: x}`, declaration.ErrOwnInstallation, "own"},
		{"the known-good record", `file: {path: /var/lib/mesh-host/known-good, content: x}`, declaration.ErrOwnInstallation, "own"},
		{"the state directory 0777", `directory: {path: /var/lib/mesh-host, mode: "0777"}`, declaration.ErrOwnInstallation, "own"},
		{"the binary", `file: {path: /usr/lib/mesh-host/mesh-host, content: x}`, declaration.ErrOwnInstallation, "own"},
		{"the launcher", `file: {path: /usr/lib/mesh-host/launcher, content: x}`, declaration.ErrOwnInstallation, "own"},
		{"the command", `file: {path: /usr/bin/mesh-host, content: x}`, declaration.ErrOwnInstallation, "own"},
		{"its configuration", `file: {path: /etc/mesh-host/x.conf, content: x}`, declaration.ErrOwnInstallation, "own"},
		{"a planted version", `directory: {path: /opt/mesh-host/versions/evil}`, declaration.ErrOwnInstallation, "versions directory"},
		{"a file in a version", `file: {path: /opt/mesh-host/versions/abc/mesh-host, content: x}`, declaration.ErrOwnInstallation, "versions directory"},
		{"an archive at a fixed version", archive("/opt/mesh-host/versions/evil"), declaration.ErrOwnInstallation, "only a release archive"},
		{"an archive over the versions", archive("/opt/mesh-host"), declaration.ErrOwnInstallation, "would replace the host's versions directory"},
		{"an archive over the state", archive("/var/lib"), declaration.ErrOwnInstallation, "would replace the host's own /var/lib/mesh-host"},
		{"an archive at the root", archive("/srv/../usr"), declaration.ErrOwnInstallation, "would replace"},
		{"its credentials as an archive source", `archive: {path: /srv/a, source: "file:///var/lib/mesh-host/node.creds", digest: "` + digest + `", format: tar}`, declaration.ErrOwnInstallation, "never reads the host's installation"},
		{"its journal as an archive source", `archive: {path: /srv/a, source: "file:///var/lib/mesh-host/journal.db", digest: "` + digest + `", format: tar}`, declaration.ErrOwnInstallation, "own /var/lib/mesh-host"},
		{"a version as an archive source", `archive: {path: /srv/a, source: "file:///opt/mesh-host/versions/abc/mesh-host", digest: "` + digest + `", format: tar}`, declaration.ErrOwnInstallation, "versions"},
		{"its package removed", `package: {name: mesh-host, state: absent}`, declaration.ErrOwnInstallation, `"mesh-host" is the host's own package`},
		{"its package declared", `package: {name: mesh-host}`, declaration.ErrOwnInstallation, "own package"},
		{"its packaged unit, state only", `unit: {name: mesh-host.service, active: false}`, declaration.ErrOwnUnit, "own unit"},
		{"an exec stopping it", `exec: {name: x, command: [systemctl, stop, mesh-host], onlyif: [/bin/true]}`, declaration.ErrOwnUnit, `"mesh-host" names the host's own unit`},
		{"an exec stopping it in a script", `exec: {name: x, command: [/bin/sh, -c, "sleep 1; systemctl kill mesh-host.service"], refresh_only: true}`, declaration.ErrOwnUnit, "own unit"},
		{"an exec removing its state", `exec: {name: x, command: [rm, -rf, /var/lib/mesh-host/], creates: /srv/x}`, declaration.ErrOwnInstallation, "own /var/lib/mesh-host"},
		{"an exec removing its state's parent", `exec: {name: x, command: [/bin/sh, -c, "rm -rf /var/lib"], creates: /srv/x}`, declaration.ErrOwnInstallation, "own /var/lib/mesh-host"},
		{"an exec guard reading its credentials", `exec: {name: x, command: [/bin/true], unless: [cat, "/var/lib/mesh-host/node.creds"]}`, declaration.ErrOwnInstallation, "own"},
		{"an exec removing its package", `exec: {name: x, command: [apt-get, purge, -y, mesh-host], onlyif: [/bin/true]}`, declaration.ErrOwnUnit, "package mesh-host"},
		{"an exec naming its unit in passing", `exec: {name: y, command: [/bin/sh, -c, "echo mesh-host.service > /srv/note"], creates: /srv/note}`, declaration.ErrOwnUnit, "own unit"},
		{"an exec creating in its versions", `exec: {name: x, command: [/bin/true], creates: /opt/mesh-host/versions/x}`, declaration.ErrOwnInstallation, "versions"},
		{"an exec working in its state", `exec: {name: x, command: [/bin/true], cwd: /var/lib/mesh-host, creates: /srv/x}`, declaration.ErrOwnInstallation, "own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := "mesh: home\nnode: n\nrevision: 1\nresources:\n  - " + c.resource + "\n"
			d, err := declaration.ParseYAML("x.yaml", []byte(doc))
			if err != nil {
				if strings.Contains(c.resource, "/..") {
					return // refused as unclean by the parser already
				}
				t.Fatalf("parse: %v", err)
			}
			err = d.RefuseInstallation(testInstallation)
			if !errors.Is(err, c.sentinel) || !errors.Is(err, declaration.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RefuseInstallation = %v, want %v containing %q", err, c.sentinel, c.want)
			}
			if !strings.HasPrefix(err.Error(), "x.yaml:5:") || !strings.Contains(err.Error(), "resources[0].") {
				t.Errorf("the refusal does not say where: %v", err)
			}
		})
	}
}

// TestInstallationAllowsTheRest: what is near the installation but not of
// it is declared as usual, the release archive among it.
func TestInstallationAllowsTheRest(t *testing.T) {
	for _, r := range []string{
		`archive: {path: "/opt/mesh-host/versions/${version}", source: "https://x/a.tar", digest: "sha256:0000000000000000000000000000000000000000000000000000000000000000", format: tar}`,
		`directory: {path: /var/lib}`,
		`directory: {path: /etc}`,
		`file: {path: /var/lib/mesh-hostile, content: x}`,
		`file: {path: /etc/systemd/system/app.service, content: "[Unit]\nAfter=mesh-host.service\n"}`,
		`unit: {name: app.service, content: "[Install]\nWantedBy=multi-user.target\n"}`,
		`unit: {name: mesh-hosted.service, content: "x"}`,
		`package: {name: mesh-host-tools}`,
		`exec: {name: x, command: [systemctl, restart, mesh-hosted], onlyif: [test, -d, /var/lib/mesh-hostile]}`,
	} {
		doc := "mesh: home\nnode: n\nrevision: 1\nresources:\n  - " + r + "\n"
		d, err := declaration.ParseYAML("x.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%s: parse: %v", r, err)
		}
		if err := d.RefuseInstallation(testInstallation); err != nil {
			t.Errorf("%s: refused: %v", r, err)
		}
	}
}
