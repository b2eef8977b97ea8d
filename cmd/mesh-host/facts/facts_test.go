package facts

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestGather reads this machine: the facts every Linux gives are there,
// and the OS is the root's, not the machine's.
func TestGather(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/os-release"), []byte("NAME=\"Debian GNU/Linux\"\nID=debian\nVERSION_ID=\"12\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := Gather(root, "v9")
	if f.OSID != "debian" || f.OSVersion != "12" || f.Version != "v9" || f.Arch != runtime.GOARCH || f.Cores < 1 {
		t.Errorf("Gather = %+v", f)
	}
	if runtime.GOOS == "linux" && (f.Kernel == "" || f.MemoryMB == 0 || f.BootID == "" || f.Hostname == "") {
		t.Errorf("Gather on Linux left out a fact every Linux gives: %+v", f)
	}
	if g := Gather(t.TempDir(), "v9"); g.OSID != "" {
		t.Errorf("a root without os-release gave OS %q", g.OSID)
	}
}
