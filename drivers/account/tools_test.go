package account_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
)

// shadow-utils' own checkers find the files the drivers wrote
// consistent: every user with its shadow line and an existing primary
// group, every group with its gshadow line, every member a user, no
// duplicate names, every line well formed.
func TestShadowUtilsAgree(t *testing.T) {
	t.Parallel()
	pwck, err := exec.LookPath("pwck")
	if err != nil {
		t.Skip("pwck is not installed (Debian's passwd package): the files are not cross-checked")
	}
	grpck, err := exec.LookPath("grpck")
	if err != nil {
		t.Skip("grpck is not installed (Debian's passwd package): the files are not cross-checked")
	}
	if os.Geteuid() != 0 {
		t.Skip("pwck -R and grpck -R chroot into the root, which needs root: the files are not cross-checked")
	}
	r, h := newRoot(t, "debian"), newHost()
	users, groups := account.NewUsers(r, h.options()), account.NewGroups(r, h.options())
	h.apply(t, groups, &drivers.GroupSpec{Name: "deploy"})
	h.apply(t, groups, &drivers.GroupSpec{Name: "metrics", GID: intp(4321), System: true})
	h.apply(t, users, &drivers.UserSpec{Name: "app", Groups: []string{"deploy", "staff"}, Password: secret(otherHash)})
	h.apply(t, users, &drivers.UserSpec{Name: "svc", System: true, Groups: []string{"metrics"}})
	h.apply(t, users, &drivers.UserSpec{Name: "web", Group: "www-data", Home: "/srv/web"})
	h.apply(t, users, &drivers.UserSpec{Name: "gone", Groups: []string{"deploy"}})
	h.apply(t, users, &drivers.UserSpec{Name: "alice", Groups: []string{"sudo", "deploy"}})
	h.apply(t, groups, &drivers.GroupSpec{Name: "deploy", GID: intp(5000), ChangeID: true})
	if err := users.Remove(t.Context(), &drivers.UserSpec{Name: "gone"}); err != nil {
		t.Fatal(err)
	}

	// pwck also checks that each home and shell exists, in the root.
	for l := range strings.Lines(read(t, r, "/etc/passwd")) {
		f := strings.Split(strings.TrimSuffix(l, "\n"), ":")
		if err := os.MkdirAll(r.Host(f[5]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(r.Host(f[6])), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(r.Host(f[6]), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tool := range []string{pwck, grpck} {
		out, err := exec.Command(tool, "-r", "-R", r.Dir()).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("%s -r -R %s: %v\n%s", filepath.Base(tool), r.Dir(), err, out)
		}
	}
}

// A real useradd waits for the host's lock, and the host keeps the user
// it added: the two edit one set of files, one after the other.
func TestUseraddWaitsForTheHost(t *testing.T) {
	t.Parallel()
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		t.Skip("useradd is not installed: the lock is not checked against it")
	}
	if os.Geteuid() != 0 {
		t.Skip("useradd -R chroots into the root, which needs root: the lock is not checked against it")
	}
	r, h := newRoot(t, "debian"), newHost()
	unlock, err := account.HoldLock(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(useradd, "-R", r.Dir(), "zed")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		unlock()
		t.Fatalf("useradd finished while the host held the lock: %v\n%s", err, out.String())
	case <-time.After(500 * time.Millisecond):
	}
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("useradd after the host let go: %v\n%s", err, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("useradd did not finish within 10s of the host letting go")
	}
	zed := line(t, r, "/etc/passwd", "zed")
	if zed == "" {
		t.Fatal("useradd did not add zed")
	}
	h.apply(t, account.NewUsers(r, h.options()), &drivers.UserSpec{Name: "app"})
	if got := line(t, r, "/etc/passwd", "zed"); got != zed {
		t.Errorf("zed after the host's Apply: %q, want %q as useradd wrote it", got, zed)
	}
	if got := field(t, r, "/etc/passwd", "app", 2); got == strings.Split(zed, ":")[2] {
		t.Errorf("app got zed's uid %s", got)
	}
}
