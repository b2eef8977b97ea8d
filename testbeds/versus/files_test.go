package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/declaration"
	"github.com/mesh-host/mesh-host/drivers"
)

// TestDeclarationIsTheFiles: the declaration mesh-host is given declares
// exactly the files verify expects, so a figure is for the same work.
func TestDeclarationIsTheFiles(t *testing.T) {
	const n = 25
	path := filepath.Join(t.TempDir(), "decl.yaml")
	if err := writeDeclaration(path, n); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := declaration.ParseYAML(path, data)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Resources) != n {
		t.Fatalf("got %d resources, want %d", len(d.Resources), n)
	}
	for i, r := range d.Resources {
		f, ok := r.(*drivers.FileSpec)
		if !ok {
			t.Fatalf("resource %d is %T, want a file", i, r)
		}
		want := "/" + filepath.Join(appDir, fileName(i))
		if f.Path != want || f.Content != fileContent(i) || f.Mode == nil || *f.Mode != fileMode {
			t.Errorf("resource %d: got %s %q %v, want %s %q %04o", i, f.Path, f.Content, f.Mode, want, fileContent(i), fileMode)
		}
	}
}

// TestVerifyCatches: a run that left a wrong content, a wrong mode, a
// stray file or a rewritten file is caught, not measured.
func TestVerifyCatches(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name  string
		spoil func(dir string) error
	}{
		{"content", func(dir string) error { return os.WriteFile(filepath.Join(dir, fileName(1)), []byte("other\n"), 0o640) }},
		{"mode", func(dir string) error { return os.Chmod(filepath.Join(dir, fileName(2)), 0o644) }},
		{"stray file", func(dir string) error { return os.WriteFile(filepath.Join(dir, "x.cf-before-edit"), nil, 0o640) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := converged(t, n)
			if err := tc.spoil(filepath.Join(root, appDir)); err != nil {
				t.Fatal(err)
			}
			if err := verify(root, n); err == nil {
				t.Error("verify passed a broken root")
			}
		})
	}
}

// TestSpoilBreaksTheRoot: each change spoil makes is one verify catches,
// so a repair row measures tools that repaired something.
func TestSpoilBreaksTheRoot(t *testing.T) {
	for _, n := range []int{1, 2, 3, 250} {
		root := converged(t, n)
		if err := spoil(root, n); err != nil {
			t.Fatal(err)
		}
		if err := verify(root, n); err == nil {
			t.Errorf("%d files: verify passed a spoiled root", n)
		}
	}
}

// TestUnchangedCatchesARewrite: the same content written again, in place
// or by rename, is a rewrite.
func TestUnchangedCatchesARewrite(t *testing.T) {
	root := converged(t, 2)
	before, err := snapshot(root)
	if err != nil {
		t.Fatal(err)
	}
	if after, err := snapshot(root); err != nil || unchanged(before, after) != nil {
		t.Fatalf("an untouched root: %v, %v", err, unchanged(before, after))
	}
	p := filepath.Join(root, appDir, fileName(0))
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(fileContent(0)), fileMode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	after, err := snapshot(root)
	if err != nil {
		t.Fatal(err)
	}
	if unchanged(before, after) == nil {
		t.Error("a file replaced by rename passed as unchanged")
	}
}

// converged makes a root holding the n files as both tools would leave it.
func converged(t *testing.T, n int) string {
	t.Helper()
	root := t.TempDir()
	if err := resetRoot(root); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		p := filepath.Join(root, appDir, fileName(i))
		if err := os.WriteFile(p, []byte(fileContent(i)), fileMode); err != nil {
			t.Fatal(err)
		}
		// WriteFile's mode passes through the umask.
		if err := os.Chmod(p, fileMode); err != nil {
			t.Fatal(err)
		}
	}
	if err := verify(root, n); err != nil {
		t.Fatalf("the converged root fails verify: %v", err)
	}
	return root
}

// TestTheOthersWriteTheFiles: the CFEngine policy and the Puppet manifest,
// run by the real tools, leave exactly the files verify expects, a second
// run rewrites none of them, and a run after changes by hand (spoil)
// repairs them; a tool missing here is said so.
func TestTheOthersWriteTheFiles(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		cmd, pkg string
		make     func(bin, dir string) (contender, error)
	}{
		{"cf-agent", "cfengine3", func(bin, dir string) (contender, error) {
			c := &cfengine{agent: bin, policy: filepath.Join(dir, "policy.cf"), dir: filepath.Join(dir, "root")}
			return c, writePolicy(c.policy, c.dir, n)
		}},
		{"puppet", "puppet", func(bin, dir string) (contender, error) {
			p := &puppet{bin: bin, manifest: filepath.Join(dir, "site.pp"), dir: filepath.Join(dir, "root"), state: filepath.Join(dir, "state")}
			return p, writeManifest(p.manifest, p.dir, n)
		}},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			bin, err := exec.LookPath(tc.cmd)
			if err != nil {
				t.Skipf("%s is missing here (Debian's %s): the comparison runs without it", tc.cmd, tc.pkg)
			}
			tool, err := tc.make(bin, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := applyRun(tool, n); err != nil {
				t.Fatalf("first apply: %v", err)
			}
			if _, err := noopRun(tool, n); err != nil {
				t.Fatalf("second run: %v", err)
			}
			if _, err := repairRun(tool, n); err != nil {
				t.Fatalf("a run after changes by hand: %v", err)
			}
		})
	}
}

// TestPuppetString: a content with Puppet's special characters reaches
// the file as it is.
func TestPuppetString(t *testing.T) {
	for in, want := range map[string]string{
		"a = 1\n":    `a = 1\n`,
		`say "$x" \`: `say \"\$x\" \\`,
	} {
		if got := puppetString(in); got != want {
			t.Errorf("puppetString(%q) = %q, want %q", in, got, want)
		}
	}
}
