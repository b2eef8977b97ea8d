package account

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// A host killed between two renames leaves a machine a login can stand
// on: a user is in passwd only once its shadow line and its groups are
// there, and leaves passwd before them. Killing is played by a write
// that fails: the file at the failing step and every later one are as
// they were.
func TestWriteOrder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"passwd":  "root:x:0:0:root:/root:/bin/sh\n",
		"shadow":  "root:*:19500:0:99999:7:::\n",
		"group":   "root:x:0:\nstaff:x:50:\n",
		"gshadow": "root:*::\nstaff:*::\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, "etc", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := rootfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	users := NewUsers(root, Options{Created: func(string, string) bool { return true }})
	has := func(file, text string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "etc", file))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(b), text)
	}

	// Made: the write of passwd, the last, fails.
	d, err := readDB(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := users.edit(d, &drivers.UserSpec{Name: "app", Groups: []string{"staff"}}, password{}); err != nil {
		t.Fatal(err)
	}
	d.passwd.path = "/missing/passwd"
	if err := d.write(root, d.madeOrder()); err == nil {
		t.Fatal("the write to /missing succeeded")
	}
	for _, want := range []struct {
		file, text string
		in         bool
	}{{"gshadow", "app:!::", true}, {"group", "staff:x:50:app", true}, {"shadow", "app:!:", true}, {"passwd", "app:", false}} {
		if has(want.file, want.text) != want.in {
			t.Errorf("after a kill before passwd: %s holding %q is %v, want %v", want.file, want.text, !want.in, want.in)
		}
	}

	// The next Apply completes it; then removal, killed at its second
	// step: the user is gone from passwd, the rest still stands.
	if _, err := users.Apply(t.Context(), &drivers.UserSpec{Name: "app", Groups: []string{"staff"}}); err != nil {
		t.Fatal(err)
	}
	if !has("passwd", "app:x:") {
		t.Fatal("the Apply after the kill did not add app to passwd")
	}
	if d, err = readDB(root); err != nil {
		t.Fatal(err)
	}
	if _, err := users.remove(d, "app"); err != nil {
		t.Fatal(err)
	}
	d.shadow.path = "/missing/shadow"
	if err := d.write(root, d.removedOrder()); err == nil {
		t.Fatal("the write to /missing succeeded")
	}
	for _, want := range []struct {
		file, text string
		in         bool
	}{{"passwd", "app:", false}, {"shadow", "app:!:", true}, {"group", "staff:x:50:app", true}, {"gshadow", "app:!::", true}} {
		if has(want.file, want.text) != want.in {
			t.Errorf("after a kill after passwd: %s holding %q is %v, want %v", want.file, want.text, !want.in, want.in)
		}
	}
}
