package account_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
)

// While another process holds /etc/.pwd.lock as lckpwdf holds it, Apply
// waits, and goes on once it is released.
func TestApplyWaitsForTheLock(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	users := account.NewUsers(r, h.options())
	release := holdLock(t, r)
	before := files(t, r)

	done := make(chan error, 1)
	go func() {
		_, err := users.Apply(context.Background(), &drivers.UserSpec{Name: "app"})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Apply returned while another process held the lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if !mapsEqual(files(t, r), before) {
		t.Fatal("Apply changed the files while another process held the lock")
	}
	release()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Apply after the lock was released: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Apply did not go on within 10s of the lock's release")
	}
	if line(t, r, "/etc/passwd", "app") == "" {
		t.Error("app is not in passwd")
	}
}

// A lock held past the timeout fails the Apply with ErrLocked, naming
// the lock; a cancelled wait returns the context's error.
func TestLockTimeout(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	h.lockWait = 200 * time.Millisecond
	groups := account.NewGroups(r, h.options())
	holdLock(t, r)
	before := files(t, r)
	start := time.Now()
	_, err := groups.Apply(t.Context(), &drivers.GroupSpec{Name: "deploy"})
	if !errors.Is(err, account.ErrLocked) || !strings.Contains(err.Error(), r.Host("/etc/.pwd.lock")) {
		t.Errorf("Apply under a held lock: %v, want ErrLocked naming %s", err, r.Host("/etc/.pwd.lock"))
	}
	if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %s, want the 200ms timeout", d)
	}
	h.lockWait = time.Hour
	groups = account.NewGroups(r, h.options())
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := groups.Apply(ctx, &drivers.GroupSpec{Name: "deploy"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Apply with a context ending while it waits: %v, want context.DeadlineExceeded", err)
	}
	if !mapsEqual(files(t, r), before) {
		t.Error("a failed Apply changed the files")
	}
}

// While the host holds the lock, another process that locks as lckpwdf
// does (useradd) finds it taken.
func TestLockExcludesOtherProcesses(t *testing.T) {
	t.Parallel()
	r := newRoot(t, "debian")
	if got := tryLock(t, r); got != "free" {
		t.Fatalf("before: the lock is %s, want free", got)
	}
	unlock, err := account.HoldLock(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got := tryLock(t, r); got != "busy" {
		t.Errorf("while the host holds it: the lock is %s to another process, want busy", got)
	}
	unlock()
	if got := tryLock(t, r); got != "free" {
		t.Errorf("after: the lock is %s, want free", got)
	}
}

// Many Applies at once, each from a driver of its own (so that nothing
// but the lock file orders them), all land: no edit is lost.
func TestConcurrentApplies(t *testing.T) {
	t.Parallel()
	r, h := newRoot(t, "debian"), newHost()
	// Forty drivers queue on one lock file, the last behind every other
	// (slowly, under the race detector): longer than the lock timeout,
	// which is for another process's lock.
	h.lockWait = 5 * time.Minute
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			users := account.NewUsers(r, h.options())
			name := "user" + string(rune('a'+i))
			if _, err := h.tryApply(t.Context(), users, &drivers.UserSpec{Name: name, Groups: []string{"staff"}}); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			groups := account.NewGroups(r, h.options())
			if _, err := h.tryApply(t.Context(), groups, &drivers.GroupSpec{Name: "group" + string(rune('a'+i))}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	uids, gids := map[string]bool{}, map[string]bool{}
	for i := range n {
		user, group := "user"+string(rune('a'+i)), "group"+string(rune('a'+i))
		for _, p := range []string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow"} {
			if line(t, r, p, user) == "" {
				t.Errorf("%s has no line for %s", p, user)
			}
		}
		for _, p := range []string{"/etc/group", "/etc/gshadow"} {
			if line(t, r, p, group) == "" {
				t.Errorf("%s has no line for %s", p, group)
			}
		}
		if !strings.Contains(line(t, r, "/etc/group", "staff"), user) {
			t.Errorf("staff does not list %s", user)
		}
		uids[field(t, r, "/etc/passwd", user, 2)] = true
		gids[field(t, r, "/etc/group", user, 2)] = true
		gids[field(t, r, "/etc/group", group, 2)] = true
	}
	if len(uids) != n || len(gids) != 2*n {
		t.Errorf("%d distinct uids and %d distinct gids, want %d and %d", len(uids), len(gids), n, 2*n)
	}
}

// A symlink at /etc/passwd, pointing outside the root, is refused and
// never followed: nothing outside the root is touched, nothing inside
// changes. So is one at the lock.
func TestSymlinkRefused(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow", "/etc/.pwd.lock"} {
		t.Run(filepath.Base(p), func(t *testing.T) {
			r, h := newRoot(t, "debian"), newHost()
			outside := filepath.Join(t.TempDir(), "target")
			const content = "outside:x:0:0::/:/bin/sh\n"
			if err := os.WriteFile(outside, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(r.Host(p)); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, r.Host(p)); err != nil {
				t.Fatal(err)
			}
			before := treeOf(t, r)
			users := account.NewUsers(r, h.options())
			if _, err := users.Apply(t.Context(), &drivers.UserSpec{Name: "app"}); !errors.Is(err, drivers.ErrUnsafePath) {
				t.Errorf("Apply with a symlink at %s: %v, want ErrUnsafePath", p, err)
			}
			if p != "/etc/.pwd.lock" {
				if _, err := users.Observe(t.Context(), &drivers.UserSpec{Name: "app"}); !errors.Is(err, drivers.ErrUnsafePath) {
					t.Errorf("Observe with a symlink at %s: %v, want ErrUnsafePath", p, err)
				}
			}
			if got := treeOf(t, r); got != before {
				t.Errorf("the root changed:\n got: %s\nwant: %s", got, before)
			}
			b, err := os.ReadFile(outside)
			if err != nil || string(b) != content {
				t.Errorf("the file outside the root: %q, %v; want it untouched", b, err)
			}
			if st, err := os.Stat(outside); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("the file outside the root: %v, %v; want mode 0600 as it was", st, err)
			}
		})
	}
}
