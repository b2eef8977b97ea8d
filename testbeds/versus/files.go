package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// fileMode is the mode both tools are told to give every file.
const fileMode = 0o640

// appDir is the directory, beneath each tool's root, that holds the files.
// It is made before a run rather than declared, so that the mesh-host
// declaration holds exactly N resources, as the CFEngine policy holds N
// promises.
const appDir = "etc/app"

// fileName and fileContent are the one definition of the set of files both
// tools are given: distinct small contents, as a configuration directory.
func fileName(i int) string    { return fmt.Sprintf("f%06d.conf", i) }
func fileContent(i int) string { return fmt.Sprintf("setting-%d = %d\n", i, i*7) }

// writeDeclaration writes the mesh-host declaration of n files.
func writeDeclaration(path string, n int) error {
	var sb strings.Builder
	sb.WriteString("mesh: versus\nnode: n1\nrevision: 1\nresources:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - file: {path: /%s/%s, content: %q, mode: \"%04o\"}\n", appDir, fileName(i), fileContent(i), fileMode)
	}
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

// writePolicy writes the CFEngine policy of n files beneath root: one
// files promise each, with its content and mode. The perms body is written
// out because the run uses no masterfiles (the standard library's m() is
// the same body); rxdirs is set only to silence its default's warning.
func writePolicy(path, root string, n int) error {
	var sb strings.Builder
	sb.WriteString("body common control { bundlesequence => { \"main\" }; }\n")
	sb.WriteString("body perms m(mode) { mode => \"$(mode)\"; rxdirs => \"false\"; }\n")
	sb.WriteString("bundle agent main {\n  files:\n")
	for i := range n {
		content := strings.TrimSuffix(fileContent(i), "\n") + "$(const.n)"
		fmt.Fprintf(&sb, "    %q create => \"true\", content => %q, perms => m(\"%04o\");\n",
			filepath.Join(root, appDir, fileName(i)), content, fileMode)
	}
	sb.WriteString("}\n")
	// cf-agent refuses a policy others can write.
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

// writeManifest writes the Puppet manifest of n files beneath root: one
// file resource each, with its content and mode.
func writeManifest(path, root string, n int) error {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "file { '%s': ensure => file, content => \"%s\", mode => '%04o' }\n",
			filepath.Join(root, appDir, fileName(i)), puppetString(fileContent(i)), fileMode)
	}
	return os.WriteFile(path, []byte(sb.String()), 0o600)
}

// puppetString escapes s for a double-quoted Puppet string: its
// backslashes, quotes, dollars and newlines.
func puppetString(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`, "\n", `\n`).Replace(s)
}

// resetRoot empties root and makes its (empty) application directory: a
// first apply starts from nothing.
//
// The old root is set aside, not removed: ext4 will not reuse an inode
// freed in the last minute or so, and scans past each one when it
// allocates, so creating 1,000 files where 1,000 were just deleted took
// 0.35 s of system time where it takes 0.02 s in a quiet directory here.
// That is a cost of the benchmark's own clean-up, paid by whichever tool
// runs next, and no machine applying a declaration pays it. What was set
// aside goes with the program's temporary directory at its end.
func resetRoot(root string) error {
	if err := setAside(root); err != nil {
		return err
	}
	return os.MkdirAll(filepath.Join(root, appDir), 0o755)
}

// resetWithState is resetRoot for a tool that keeps state of its own
// (a journal, Puppet's vardir) in state, which is set aside too.
func resetWithState(root, state string) error {
	if err := setAside(state); err != nil {
		return err
	}
	return resetRoot(root)
}

// setAside moves path, if it exists, into the "spent" directory beside it
// under a name of its own.
func setAside(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	spent := filepath.Join(filepath.Dir(path), "spent")
	if err := os.MkdirAll(spent, 0o755); err != nil {
		return err
	}
	aside, err := os.MkdirTemp(spent, filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	return os.Rename(path, filepath.Join(aside, filepath.Base(path)))
}

// verify fails unless root's application directory holds exactly the n
// files, each regular, with its content and mode: a fast run that wrote
// the wrong thing is no figure.
func verify(root string, n int) error {
	dir := filepath.Join(root, appDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) != n {
		return fmt.Errorf("%s holds %d entries, want %d", dir, len(entries), n)
	}
	for i := range n {
		p := filepath.Join(dir, fileName(i))
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != fileMode {
			return fmt.Errorf("%s: mode %v, want regular %04o", p, fi.Mode(), fileMode)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if want := fileContent(i); !bytes.Equal(got, []byte(want)) {
			return fmt.Errorf("%s: content %q, want %q", p, got, want)
		}
	}
	return nil
}

// spoil changes three files in every hundred of root's n, as a hand
// would: one's content edited, one's mode widened, one deleted.
func spoil(root string, n int) error {
	dir := filepath.Join(root, appDir)
	for i := 0; i < n; i += 100 {
		if err := os.WriteFile(filepath.Join(dir, fileName(i)), []byte("edited by hand\n"), fileMode); err != nil {
			return err
		}
		if i+1 < n {
			if err := os.Chmod(filepath.Join(dir, fileName(i+1)), 0o666); err != nil {
				return err
			}
		}
		if i+2 < n {
			if err := os.Remove(filepath.Join(dir, fileName(i+2))); err != nil {
				return err
			}
		}
	}
	return nil
}

// identity is what a rewrite changes: a new inode (write and rename) or a
// new modification time (written in place).
type identity struct {
	ino   uint64
	mtime syscall.Timespec
}

// snapshot records the identity of every file in root's application
// directory.
func snapshot(root string) (map[string]identity, error) {
	ids := make(map[string]identity)
	err := filepath.WalkDir(filepath.Join(root, appDir), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		ids[p] = identity{ino: st.Ino, mtime: st.Mtim}
		return nil
	})
	return ids, err
}

// unchanged fails if any file of before was rewritten, removed or added:
// a no-op run must touch nothing.
func unchanged(before, after map[string]identity) error {
	if len(before) != len(after) {
		return fmt.Errorf("%d files before, %d after", len(before), len(after))
	}
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			return fmt.Errorf("%s: gone", p)
		case a != b:
			return fmt.Errorf("%s: rewritten (inode %d, mtime %v before; inode %d, mtime %v after)", p, b.ino, b.mtime, a.ino, a.mtime)
		}
	}
	return nil
}
