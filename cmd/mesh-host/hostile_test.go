package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/declaration"
)

// The hostile-input corpus: declarations an attacker with the mesh's
// signing key, or a compromised operator, would push, each applied by the
// real `mesh-host apply` to a scratch tree holding a root (whose state
// directory and versions are the host's own, under the root, so that the
// installation is there to be attacked) and, beside it, a directory outside
// the root with files worth stealing or spoiling. Each item is refused or
// fails with its reason; the whole scratch tree is snapshotted before and
// after, and nothing changed but the journal and what the item names as
// its own (a path in the root the declaration may legitimately write);
// and the journal is intact afterwards (`replay --verify`).

// hostileItem is one entry of the corpus.
type hostileItem struct {
	name string
	// setup prepares the scratch tree; s.outside is outside the root.
	setup func(t *testing.T, s *scratch)
	// resources are the declaration's resources, as YAML list items;
	// OUTSIDE in them is replaced by the directory outside the root.
	resources string
	// code is the exit code wanted: 2 refused, 1 a resource failed, 0
	// applied (where the attack is defeated by doing it safely).
	code int
	// want is a regular expression the output must match: the reason.
	want string
	// never is text the output must not hold (a secret's digest).
	never string
	// changes are paths in the scratch tree (relative to it) the item may
	// change: what the declaration legitimately writes inside the root.
	changes []string
}

// scratch is the tree an item runs in.
type scratch struct {
	dir, root, state, outside string
}

func (s *scratch) in(p string) string { return filepath.Join(s.root, p) }

// shadow is a secret file in the root; its digest is what an error must
// never reveal.
const shadow = "root:$6$secret:19000:0:99999:7:::\n"

var shadowDigest = func() string { sum := sha256.Sum256([]byte(shadow)); return hex.EncodeToString(sum[:]) }()

func hostileCorpus() []hostileItem {
	const digest = "sha256:0000000000000000000000000000000000000000000000000000000000000000"
	archive := func(path, source string) string {
		return fmt.Sprintf("archive: {path: %q, source: %q, digest: %q, format: tar.gz}", path, source, digest)
	}
	return []hostileItem{
		// The host's own installation, by every resource kind.
		{name: "file over the journal", resources: `file: {path: /var/lib/mesh-host/journal.db, content: ""}`, code: 2, want: `/var/lib/mesh-host/journal.db is the host.s own /var/lib/mesh-host`},
		{name: "file over the credentials", resources: `file: {path: /var/lib/mesh-host/node.creds, content: "x"}`, code: 2, want: `host.s own`},
		{name: "file over the known-good record", resources: `file: {path: /var/lib/mesh-host/known-good, content: "evil"}`, code: 2, want: `host.s own`},
		{name: "state directory opened up", resources: `directory: {path: /var/lib/mesh-host, mode: "0777"}`, code: 2, want: `host.s own`},
		{name: "archive over the state's parent", resources: archive("/var/lib", "https://example.com/a.tgz"), code: 2, want: `would replace the host.s own /var/lib/mesh-host`},
		{name: "archive reading the credentials", resources: archive("/srv/a", "file:///var/lib/mesh-host/node.creds"), code: 2, want: `never reads the host.s installation`},
		{name: "unit by its name", resources: `unit: {name: mesh-host.service, content: "[Service]\nExecStart=/bin/false\n"}`, code: 2, want: `"mesh-host.service" is the host.s own unit`},
		{name: "unit template", resources: `unit: {name: mesh-host@.service, content: "[Service]\nExecStart=/bin/false\n"}`, code: 2, want: `own unit`},
		{name: "unit aliasing it", resources: `unit: {name: evil.service, content: "[Service]\nExecStart=/bin/true\n[Install]\nAlias=mesh-host.service\n"}`, code: 2, want: `Alias= names`},
		{name: "unit wanted by it", resources: `unit: {name: evil.service, content: "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=mesh-host.service\n"}`, code: 2, want: `WantedBy= names`},
		{name: "unit file in /etc", resources: `file: {path: /etc/systemd/system/mesh-host.service, content: "[Service]\nExecStart=/bin/false\n"}`, code: 2, want: `names the host.s own unit`},
		{name: "drop-in", resources: `file: {path: /etc/systemd/system/mesh-host.service.d/override.conf, content: "[Service]\nExecStart=\n"}`, code: 2, want: `mesh-host.service.d`},
		{name: "file over its binary", resources: `file: {path: /usr/bin/mesh-host, content: "#!/bin/sh\n"}`, code: 2, want: `host.s own`},
		{name: "file over its launcher", resources: `file: {path: /usr/lib/mesh-host/launcher, content: "#!/bin/sh\n"}`, code: 2, want: `host.s own`},
		{name: "planted version directory", resources: `directory: {path: /opt/mesh-host/versions/evil}`, code: 2, want: `only a release archive`},
		{name: "file in a version", resources: `file: {path: /opt/mesh-host/versions/abc/mesh-host, content: "#!/bin/sh\n"}`, code: 2, want: `versions directory`},
		{name: "its package removed", resources: `package: {name: mesh-host, state: absent}`, code: 2, want: `"mesh-host" is the host.s own package`},

		// Special bits and unclean paths, refused by the parser.
		{name: "setuid file", resources: `file: {path: /srv/x, content: "x", mode: "4777"}`, code: 2, want: `sets setuid, setgid or the sticky bit`},
		{name: "setgid file", resources: `file: {path: /srv/x, content: "x", mode: "2755"}`, code: 2, want: `sets setuid, setgid or the sticky bit`},
		{name: "dot-dot out of the root", resources: `file: {path: /srv/../../OUTSIDE/precious, content: "x"}`, code: 2, want: `path`},

		// Archive sources outside the root, or not files.
		{name: "archive source on the machine, outside the root",
			setup: func(t *testing.T, s *scratch) {
				writeFile(t, filepath.Join(s.outside, "a.tgz"), "not an archive", 0o644)
			},
			resources: archive("/srv/app", "file://OUTSIDE/a.tgz"), code: 1, want: `no such file or directory`},
		{name: "archive source through a symlink",
			setup:     func(t *testing.T, s *scratch) { symlink(t, filepath.Join(s.outside, "precious"), s.in("srv/a.tgz")) },
			resources: archive("/srv/app", "file:///srv/a.tgz"), code: 1, want: `a symlink, not a regular file`},
		{name: "archive source through a symlinked directory",
			setup:     func(t *testing.T, s *scratch) { symlink(t, s.outside, s.in("srv/cache")) },
			resources: archive("/srv/app", "file:///srv/cache/precious"), code: 1, want: `symlink is in the way`},
		{name: "archive source a FIFO",
			setup: func(t *testing.T, s *scratch) {
				if err := unix.Mkfifo(s.in("srv/fifo"), 0o600); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
			},
			resources: archive("/srv/app", "file:///srv/fifo"), code: 1, want: `a FIFO, not a regular file`},
		{name: "archive digest oracle",
			setup:     func(t *testing.T, s *scratch) { writeFile(t, s.in("srv/shadow"), shadow, 0o600) },
			resources: archive("/srv/app", "file:///srv/shadow"), code: 1, want: `want ` + digest + `, and the content fetched is not that`,
			never: shadowDigest},

		// Over the limits on a declaration: refused before anything is
		// journaled as received.
		{name: "a path over the limit", resources: `file: {path: /srv/` + strings.Repeat("a/", declaration.MaxPathBytes/2) + `x, content: "x"}`, code: 2, want: `the limit for a path`},
		{name: "a path element over NAME_MAX", resources: `file: {path: /srv/` + strings.Repeat("a", declaration.MaxPathElementBytes+1) + `, content: "x"}`, code: 2, want: `the limit for an element of a path`},
		{name: "content over the limit", resources: `file: {path: /srv/x, content: "` + strings.Repeat("x", declaration.MaxContentBytes+1) + `"}`, code: 2, want: `the limit for content`},
		{name: "more resources than the limit", resources: manyResources(declaration.MaxResources + 1), code: 2, want: `the limit of resources in a declaration`},
		{name: "a declaration over the limit", resources: manyContents(declaration.MaxBytes/declaration.MaxContentBytes+1, declaration.MaxContentBytes), code: 2, want: `the limit for a declaration`},

		// Symlinks and hard links planted in the root.
		{name: "file through a symlinked parent",
			setup:     func(t *testing.T, s *scratch) { symlink(t, s.outside, s.in("srv/conf")) },
			resources: `file: {path: /srv/conf/precious, content: "spoiled"}`, code: 1, want: `symlink`},
		{name: "directory mode through a symlink",
			setup:     func(t *testing.T, s *scratch) { symlink(t, s.outside, s.in("srv/data")) },
			resources: `directory: {path: /srv/data, mode: "0777"}`, code: 1, want: `symlink`},
		{name: "file over a symlink to outside",
			setup:     func(t *testing.T, s *scratch) { symlink(t, filepath.Join(s.outside, "precious"), s.in("srv/motd")) },
			resources: `file: {path: /srv/motd, content: "hello\n", mode: "0666"}`, code: 0, want: `srv/motd`,
			changes: []string{"root/srv/motd"}},
		{name: "file over a hard link to outside",
			setup: func(t *testing.T, s *scratch) {
				if err := os.Link(filepath.Join(s.outside, "precious"), s.in("srv/linked")); err != nil {
					t.Fatal(err)
				}
			},
			resources: `file: {path: /srv/linked, content: "keep", mode: "0666"}`, code: 0, want: `srv/linked`,
			changes: []string{"root/srv/linked"}},
	}
}

// manyResources is n directory resources, as YAML list items.
func manyResources(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString("\n  - ")
		}
		fmt.Fprintf(&b, "directory: {path: /srv/d%d}", i)
	}
	return b.String()
}

// manyContents is n files, each of size bytes.
func manyContents(n, size int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString("\n  - ")
		}
		fmt.Fprintf(&b, "file: {path: /srv/f%d, content: %q}", i, strings.Repeat("x", size))
	}
	return b.String()
}

// TestHostileCorpus applies each item of the corpus to a fresh scratch
// tree.
func TestHostileCorpus(t *testing.T) {
	for _, item := range hostileCorpus() {
		t.Run(item.name, func(t *testing.T) {
			s := newScratch(t)
			if item.setup != nil {
				item.setup(t, s)
			}
			decl := filepath.Join(s.dir, "hostile.yaml")
			doc := "mesh: test\nnode: n1\nrevision: 1\nresources:\n  - " + strings.ReplaceAll(item.resources, "OUTSIDE", s.outside) + "\n"
			writeFile(t, decl, doc, 0o600)
			before := snapshotTree(t, s.dir)

			out, code := runHostile(t, s, "apply", decl)
			t.Logf("apply: exit %d\n%s", code, out)
			if code != item.code {
				t.Errorf("apply: exit %d, want %d", code, item.code)
			}
			if !regexp.MustCompile(item.want).MatchString(out) {
				t.Errorf("apply's output does not say %q", item.want)
			}
			if item.code == 2 {
				// Refused: never journaled as received, so nothing of it
				// is ever reconciled.
				out, _ := runHostile(t, s, "journal", "--kind", "declaration.received")
				if strings.Contains(out, "declaration.received") {
					t.Errorf("a refused declaration was journaled as received:\n%s", out)
				}
			}
			if item.never != "" {
				journal, _ := runHostile(t, s, "journal", "--json")
				if strings.Contains(out, item.never) || strings.Contains(journal, item.never) {
					t.Errorf("apply's output or the journal holds %s", item.never)
				}
			}

			after := snapshotTree(t, s.dir)
			allowed := map[string]bool{"root/var/lib/mesh-host/journal.db": true}
			for _, c := range item.changes {
				allowed[c] = true
			}
			for _, d := range diffTrees(before, after) {
				if !allowed[d] {
					t.Errorf("the item changed %s:\n before: %s\n  after: %s", d, before[d], after[d])
				}
			}
			if out, code := runHostile(t, s, "replay", "--verify"); code != 0 || !strings.Contains(out, "matches the stored projection") {
				t.Errorf("replay --verify after the item: exit %d\n%s", code, out)
			}
		})
	}
}

func newScratch(t *testing.T) *scratch {
	t.Helper()
	dir := t.TempDir()
	s := &scratch{dir: dir, root: filepath.Join(dir, "root"), outside: filepath.Join(dir, "outside")}
	// The host's state, binaries and versions are under the root, as they
	// are on a node whose root is /: the installation is there to attack.
	s.state = s.in("var/lib/mesh-host")
	for _, d := range []string{s.outside, s.in("srv"), s.in("etc/systemd/system"), s.in("usr/bin"), s.in("usr/lib/mesh-host"), s.in("opt/mesh-host/versions")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(s.state, 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.outside, "precious"), "precious\n", 0o644)
	writeFile(t, s.in("usr/bin/mesh-host"), "#!/bin/sh\n# the host\n", 0o755)
	writeFile(t, s.in("usr/lib/mesh-host/launcher"), "#!/bin/sh\n# the launcher\n", 0o755)
	writeFile(t, filepath.Join(s.state, "node.creds"), "-----BEGIN NATS USER JWT-----\n", 0o600)
	writeFile(t, filepath.Join(s.state, "known-good"), "abc\n", 0o600)
	return s
}

func runHostile(t *testing.T, s *scratch, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	full := append([]string{"--root", s.root, "--state-dir", s.state}, args...)
	code := runCLI(t.Context(), full, &out, &out, nil)
	return out.String(), code
}

func writeFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// snapshotTree describes every entry under dir without following a
// symlink or opening anything but a regular file: its type, mode, owner,
// inode, size and content digest, or a symlink's target.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	snap := make(map[string]string)
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s %d:%d ino=%d", fi.Mode(), st.Uid, st.Gid, st.Ino)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" %d bytes sha256:%s", len(b), hex.EncodeToString(sum[:8]))
		}
		snap[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// diffTrees lists the paths whose description differs, sorted.
func diffTrees(before, after map[string]string) []string {
	var d []string
	for p, b := range before {
		if after[p] != b {
			d = append(d, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			d = append(d, p)
		}
	}
	sort.Strings(d)
	return d
}

// TestHostileCorpusSeesChanges: the snapshot the corpus relies on sees a
// change outside the root (mode, content, a new file), so a corpus that
// passes is not blind.
func TestHostileCorpusSeesChanges(t *testing.T) {
	s := newScratch(t)
	before := snapshotTree(t, s.dir)
	precious := filepath.Join(s.outside, "precious")
	if err := os.Chmod(precious, 0o666); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(s.outside, "new"), "x", 0o644)
	got := diffTrees(before, snapshotTree(t, s.dir))
	want := []string{"outside/new", "outside/precious"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("diffTrees = %v, want %v", got, want)
	}
}

// TestOutputIsTerminalSafe: a declaration's strings (here a path holding
// an escape sequence that would set the terminal's title) reach the
// operator's terminal escaped, in apply's table and in the journal.
func TestOutputIsTerminalSafe(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(filepath.Join(root, "srv"), 0o755); err != nil {
		t.Fatal(err)
	}
	decl := filepath.Join(dir, "esc.yaml")
	writeFile(t, decl, "mesh: test\nnode: n1\nrevision: 1\nresources:\n  - file: {path: \"/srv/\\e]0;pwned\\a\", content: \"x\"}\n", 0o600)
	for _, args := range [][]string{{"apply", decl}, {"journal"}, {"status", "--owned"}} {
		var out bytes.Buffer
		code := Main(append([]string{"--root", root, "--state-dir", filepath.Join(dir, "state")}, args...), &out, &out)
		if code != 0 || !strings.Contains(out.String(), `\x1b]0;pwned\x07`) {
			t.Errorf("%v: exit %d, output does not show the escaped path:\n%s", args, code, out.String())
		}
		if bytes.ContainsAny(out.Bytes(), "\x1b\x07") {
			t.Errorf("%v wrote a raw control character to the terminal:\n%q", args, out.String())
		}
	}
}
