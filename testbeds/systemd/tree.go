package systemd

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the tree is made of. The recipe's hash names the tree, so a change
// to any of them builds a new one beside the old.
const (
	suite  = "bookworm"
	mirror = "http://deb.debian.org/debian"
	// procps is on every Debian system but a minimal one: it has
	// /bin/kill, which the web server's unit reloads it with.
	includes = "systemd,systemd-sysv,dbus,procps"
)

// recipe runs inside the tree once debootstrap has made it: see tree.sh.
//
//go:embed tree.sh
var recipe []byte

// OfflinePackage is a web server the tree does not have installed but
// whose packages it holds in a local apt repository, its only apt source:
// `apt-get install lighttpd` works in a container without a network.
const OfflinePackage = "lighttpd"

// Limits of a build: debootstrap downloads about 40 MB and takes a minute.
const (
	buildLimit = 20 * time.Minute
	lockLimit  = 25 * time.Minute
)

// RecipeVersion names the recipe: a digest of everything the tree is made
// from.
func RecipeVersion() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", suite, mirror, includes)
	h.Write(recipe)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// Tree returns the cached tree, building it first if there is none: in
// the user's cache directory (os.UserCacheDir()/mesh-host), under a name
// that carries RecipeVersion. It is built in a directory beside it and
// renamed into place when complete, under a file lock, so that two test
// processes do not build it at once and a half-built tree is never used.
// Containers never write to it (see Boot).
func Tree(tb TB) string {
	tb.Helper()
	Require(tb)
	cache, err := os.UserCacheDir()
	if err != nil {
		tb.Fatalf("the systemd test tree: %v", err)
	}
	path, err := ensureTree(filepath.Join(cache, "mesh-host"), tb.Logf)
	if err != nil {
		tb.Fatalf("the systemd test tree: %v", err)
	}
	return path
}

func ensureTree(cacheDir string, logf func(string, ...any)) (string, error) {
	name := "systemd-" + suite + "-" + RecipeVersion()
	final := filepath.Join(cacheDir, name)
	if isDir(final) {
		return final, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(cacheDir, name+".lock"), lockLimit, func() {
		logf("waiting for another process building %s", final)
	})
	if err != nil {
		return "", err
	}
	defer unlock()
	if isDir(final) { // built by the process we waited for
		return final, nil
	}
	// Left by a build that was killed: nobody else builds under the lock.
	stale, _ := filepath.Glob(filepath.Join(cacheDir, name+".build-*"))
	for _, dir := range stale {
		if err := removeTree(dir); err != nil {
			return "", fmt.Errorf("remove the unfinished build %s: %w", dir, err)
		}
	}
	tmp, err := os.MkdirTemp(cacheDir, name+".build-")
	if err != nil {
		return "", err
	}
	logPath := filepath.Join(cacheDir, name+".build.log")
	start := time.Now()
	logf("building the systemd test tree %s: debootstrap %s (%s) from %s, then tree.sh; about a minute, once", final, suite, includes, mirror)
	if err := buildTree(tmp, logPath); err != nil {
		_ = removeTree(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = removeTree(tmp)
		return "", err
	}
	os.Remove(logPath)
	logf("built the systemd test tree in %s", time.Since(start).Round(time.Second))
	return final, nil
}

// buildTree makes the tree in dir, logging every command's output to
// logPath; an error carries the log's tail.
func buildTree(dir, logPath string) error {
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	ctx, cancel := context.WithTimeout(context.Background(), buildLimit)
	defer cancel()
	// The tree's root is the container's "/": a temporary directory's
	// 0700 would shut out every user but root (apt's _apt, dbus's
	// messagebus, a web server's www-data).
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	steps := []struct {
		what  string
		cmd   *exec.Cmd
		stdin []byte
	}{
		{"debootstrap", exec.CommandContext(ctx, "debootstrap", "--variant=minbase", "--include="+includes, suite, dir, mirror), nil},
		{"tree.sh", exec.CommandContext(ctx, "chroot", dir, "/bin/sh", "-s"), recipe},
	}
	for _, s := range steps {
		fmt.Fprintf(log, "==== %s\n", strings.Join(s.cmd.Args, " "))
		s.cmd.Stdout, s.cmd.Stderr = log, log
		s.cmd.Stdin = bytes.NewReader(s.stdin)
		s.cmd.Env = buildEnv()
		if err := s.cmd.Run(); err != nil {
			log.Sync()
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("%s: %w (log: %s)\n%s", s.what, err, logPath, tail(b, 4000))
		}
	}
	return nil
}

// buildEnv is a clean environment for debootstrap and the recipe, keeping
// a proxy the machine may need to reach the mirror.
func buildEnv() []string {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LC_ALL=C", "DEBIAN_FRONTEND=noninteractive"}
	for _, k := range []string{"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// lockFile takes an exclusive lock on path, polling until limit; waiting
// is called once if another process holds it.
func lockFile(path string, limit time.Duration, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(limit)
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !told {
			waiting()
			told = true
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: still held by another process after %s", path, limit)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// removeTree removes a tree a build left, unmounting first whatever is
// mounted in it (debootstrap mounts /proc and /sys in the tree while it
// works, and a build killed then leaves them): removing files through
// such a mount would reach the machine's own.
func removeTree(dir string) error {
	mounts, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	for _, m := range mounts { // deepest first
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists the mount points beneath dir, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		if strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
