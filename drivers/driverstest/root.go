package driverstest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// The accounts NewRoot's etc/passwd and etc/group hold: root, user app
// (1234) and groups staff (50) and app (1234).
const (
	Passwd = "root:x:0:0:root:/root:/bin/sh\napp:x:1234:1234::/srv/app:/bin/false\n"
	Group  = "root:x:0:\nstaff:x:50:\napp:x:1234:\n"
)

// NewRoot is a Root over a fresh directory holding etc/passwd and
// etc/group (see Passwd and Group) and the directories dirs.
func NewRoot(t *testing.T, dirs ...string) *rootfs.Root {
	t.Helper()
	dir := t.TempDir()
	for _, d := range append([]string{"etc"}, dirs...) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range map[string]string{"etc/passwd": Passwd, "etc/group": Group} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return OpenRoot(t, dir)
}

// OpenRoot is a Root over dir, closed when t ends.
func OpenRoot(t testing.TB, dir string) *rootfs.Root {
	t.Helper()
	r, err := rootfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}
