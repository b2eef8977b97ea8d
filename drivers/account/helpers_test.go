package account_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/drivers"
	"github.com/mesh-host/mesh-host/drivers/account"
	"github.com/mesh-host/mesh-host/drivers/driverstest"
	"github.com/mesh-host/mesh-host/drivers/rootfs"
)

// The lock helper is this test binary run again: an fcntl lock is the
// process's, so holding one against the drivers takes another process,
// one that locks /etc/.pwd.lock as lckpwdf(3), and so useradd, does.
const (
	helperEnv     = "ACCOUNT_TEST_LOCK_HELPER" // "hold" or "try"
	helperPathEnv = "ACCOUNT_TEST_LOCK_PATH"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(lockHelper(mode, os.Getenv(helperPathEnv)))
	}
	os.Exit(m.Run())
}

// lockHelper locks path as lckpwdf does. "hold" waits for the lock
// (F_SETLKW), prints "locked" and holds it until its standard input
// closes; "try" tries it once (F_SETLK) and prints "free" or "busy".
func lockHelper(mode, path string) int {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	lk := unix.Flock_t{Type: unix.F_WRLCK}
	switch mode {
	case "hold":
		if err := unix.FcntlFlock(uintptr(fd), unix.F_SETLKW, &lk); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		fmt.Println("locked")
		bufio.NewReader(os.Stdin).ReadString(0) // until EOF
	case "try":
		err := unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &lk)
		switch {
		case err == nil:
			fmt.Println("free")
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EACCES):
			fmt.Println("busy")
		default:
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
	default:
		return 2
	}
	return 0
}

// holdLock starts a helper that holds the root's /etc/.pwd.lock; release
// ends it (and is called at cleanup in any case).
func holdLock(t *testing.T, root *rootfs.Root) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=hold", helperPathEnv+"="+root.Host("/etc/.pwd.lock"))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	release = sync.OnceFunc(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("lock helper: %v", err)
		}
	})
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock helper said %q, %v; want \"locked\"", line, err)
	}
	return release
}

// tryLock asks a helper process whether the root's lock is free to
// another process, as lckpwdf would find it.
func tryLock(t *testing.T, root *rootfs.Root) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=try", helperPathEnv+"="+root.Host("/etc/.pwd.lock"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lock helper: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// shadowGID is Debian's group shadow, which testdata's group file has.
const shadowGID = 42

// newRoot is a fresh root whose etc holds testdata/set's four files,
// passwd and group 0644, shadow and gshadow 0640 (and of group shadow
// when the test runs as root), as on Debian.
func newRoot(t *testing.T, set string) *rootfs.Root {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"passwd": 0o644, "group": 0o644, "shadow": 0o640, "gshadow": 0o640} {
		b, err := os.ReadFile(filepath.Join("testdata", set, name))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "etc", name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		if mode == 0o640 && os.Geteuid() == 0 {
			if err := os.Chown(p, 0, shadowGID); err != nil {
				t.Fatal(err)
			}
		}
	}
	return driverstest.OpenRoot(t, dir)
}

// read returns the root's file p.
func read(t *testing.T, r *rootfs.Root, p string) string {
	t.Helper()
	b, err := os.ReadFile(r.Host(p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// files is the root's four files, for comparing before and after.
func files(t *testing.T, r *rootfs.Root) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range []string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/gshadow"} {
		out[p] = read(t, r, p)
	}
	return out
}

// line returns the line of name in the root's file p, "" when none.
func line(t *testing.T, r *rootfs.Root, p, name string) string {
	t.Helper()
	for l := range strings.Lines(read(t, r, p)) {
		if strings.HasPrefix(l, name+":") {
			return strings.TrimSuffix(l, "\n")
		}
	}
	return ""
}

// field returns field n of name's line in p.
func field(t *testing.T, r *rootfs.Root, p, name string, n int) string {
	t.Helper()
	l := line(t, r, p, name)
	f := strings.Split(l, ":")
	if len(f) <= n {
		t.Fatalf("%s has no field %d for %s: %q", p, n, name, l)
	}
	return f[n]
}

// now is the clock the tests give the drivers, and today its shadow day.
var (
	now   = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	today = fmt.Sprint(now.Unix() / 86400)
)

// number is an id of a kind, "uid" or "gid".
type number struct {
	kind string
	id   int
}

// host plays the host's part: it remembers, as the journal does, what
// each Apply created and the ids it reported, and answers the drivers'
// Options from that.
type host struct {
	mu       sync.Mutex
	created  map[string]bool // kind + ":" + name
	reserved map[number]string
	lockWait time.Duration
}

func newHost() *host {
	return &host{created: map[string]bool{}, reserved: map[number]string{}}
}

func (h *host) options() account.Options {
	return account.Options{
		Reserved: func(kind string, id int) (string, bool) {
			h.mu.Lock()
			defer h.mu.Unlock()
			name, ok := h.reserved[number{kind, id}]
			return name, ok
		},
		Created: func(kind, name string) bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.created[kind+":"+name]
		},
		Now:         func() time.Time { return now },
		LockTimeout: h.lockWait,
	}
}

// reserve says id of kind was name's.
func (h *host) reserve(kind string, id int, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reserved[number{kind, id}] = name
}

// create says the host created kind name.
func (h *host) create(kind, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.created[kind+":"+name] = true
}

// apply applies spec with d and records what the host's journal would.
func (h *host) apply(t *testing.T, d drivers.Driver, spec drivers.Spec) drivers.Action {
	t.Helper()
	a, err := h.tryApply(t.Context(), d, spec)
	if err != nil {
		t.Fatalf("Apply(%s): %v", drivers.ID(spec), err)
	}
	return a
}

func (h *host) tryApply(ctx context.Context, d drivers.Driver, spec drivers.Spec) (drivers.Action, error) {
	a, err := d.Apply(ctx, spec)
	if err != nil {
		return a, err
	}
	numbers := d.(drivers.Numbered).Numbers(spec)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range numbers {
		h.reserved[number{n.Kind, n.ID}] = n.Name
	}
	if a == drivers.Created {
		h.created[string(spec.Kind())+":"+spec.Key()] = true
		if spec.Kind() == drivers.KindUser && len(numbers) > 1 {
			h.created[account.CreatedUserGroup+":"+spec.Key()] = true
		}
	}
	return a, nil
}

func intp(i int) *int { return &i }

// secret is a password secret opened with a digest key, as the host
// provides one.
func secret(hash string) *drivers.Secret {
	s := &drivers.Secret{Name: "pw-" + fmt.Sprint(len(hash))}
	s.Provide([]byte(hash), []byte("node digest key"))
	return s
}

// The hashes of testdata: alice's, and another.
const (
	aliceHash = "$6$abcdefgh$oGoxMtczJ0/xYkNKQnGuC3pOdNoGsZRZNs7n5JzX8KfMJWEmD2Bx4wBt/tMCPvjE87aPyrlQPEKxEcxV6d4J6."
	otherHash = "$6$zyxwvuts$NKPGFt.L0T1udqsKdj9yDMlnOYYg5F4rssLibMkl9eYcDILs2f70wdGEWYyAWqVwIH7Zh3sdSINcTCOH5i/bF/"
)

// treeOf lists the root as driverstest.Tree does.
func treeOf(t *testing.T, r *rootfs.Root) string {
	t.Helper()
	return driverstest.Tree(t, r.Dir())
}
