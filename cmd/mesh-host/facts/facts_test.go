package facts

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestOSReleaseStaysInTheRoot: os-release is read as the machine reads it,
// through the usual relative symlink, but a symlink leading out of the
// root is resolved inside it, a FIFO is not opened for reading (it would
// hold the service), and a value is bounded.
func TestOSReleaseStaysInTheRoot(t *testing.T) {
	mk := func(t *testing.T, root string, dirs ...string) {
		t.Helper()
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	write := func(t *testing.T, path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("the usual symlink", func(t *testing.T) {
		root := t.TempDir()
		mk(t, root, "etc", "usr/lib")
		write(t, filepath.Join(root, "usr/lib/os-release"), "ID=debian\nVERSION_ID=\"12\"\n")
		if err := os.Symlink("../usr/lib/os-release", filepath.Join(root, "etc/os-release")); err != nil {
			t.Fatal(err)
		}
		if id, v := osRelease(root); id != "debian" || v != "12" {
			t.Errorf("got %q %q, want debian 12", id, v)
		}
	})

	t.Run("a symlink out of the root", func(t *testing.T) {
		outside := filepath.Join(t.TempDir(), "secret")
		write(t, outside, "ID=outside\nVERSION_ID=leaked\n")
		root := t.TempDir()
		mk(t, root, "etc")
		if err := os.Symlink(outside, filepath.Join(root, "etc/os-release")); err != nil {
			t.Fatal(err)
		}
		if id, v := osRelease(root); id != "" || v != "" {
			t.Errorf("read %q %q from outside the root", id, v)
		}
	})

	t.Run("a FIFO", func(t *testing.T) {
		root := t.TempDir()
		mk(t, root, "etc")
		if err := unix.Mkfifo(filepath.Join(root, "etc/os-release"), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		done := make(chan struct{})
		go func() { osRelease(root); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("reading a FIFO os-release did not return")
		}
	})

	t.Run("a long value", func(t *testing.T) {
		root := t.TempDir()
		mk(t, root, "etc")
		write(t, filepath.Join(root, "etc/os-release"), "ID="+strings.Repeat("x", 1000)+"\n")
		if id, _ := osRelease(root); len(id) > maxFact {
			t.Errorf("an ID of %d bytes was kept", len(id))
		}
	})
}
