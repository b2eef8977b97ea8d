package systemd

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A container's control groups. systemd-nspawn --keep-unit runs the
// container in the cgroup it was started in, and makes "payload" and
// "supervisor" groups beneath it: started from the machine's root cgroup,
// two containers would share them. So each gets a group of its own, in
// every hierarchy nspawn uses: the unified (v2) one, and on a legacy or
// hybrid machine systemd's named v1 hierarchy (name=systemd), where the
// container's systemd keeps its units.

// newCgroups makes a group named name beneath this process's own in each
// hierarchy nspawn uses, and returns their directories.
func newCgroups(name string) ([]string, error) {
	parents, err := cgroupParents()
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, p := range parents {
		d := filepath.Join(p, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			_ = removeCgroups(dirs, 5*time.Second)
			return nil, fmt.Errorf("make the container's cgroup: %w", err)
		}
		dirs = append(dirs, d)
	}
	return dirs, nil
}

// cgroupParents are this process's cgroup directories in the unified
// hierarchy and in name=systemd, where they are mounted.
func cgroupParents() ([]string, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		// ID:CONTROLLERS:PATH; the unified hierarchy's controllers are "".
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) != 3 {
			continue
		}
		key := f[1]
		if key != "" && key != "name=systemd" {
			continue
		}
		mp, ok := mounts[key]
		if !ok {
			continue
		}
		out = append(out, filepath.Join(mp, f[2]))
	}
	if len(out) == 0 {
		return nil, errors.New("no cgroup hierarchy for systemd-nspawn: neither cgroup2 nor name=systemd is mounted")
	}
	return out, nil
}

// cgroupMounts maps "" to where cgroup2 is mounted and "name=systemd" to
// where that v1 hierarchy is.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(tail) < 3 {
			continue
		}
		mp := unescapeMount(fields[4])
		switch {
		case tail[0] == "cgroup2":
			out[""] = mp
		case tail[0] == "cgroup" && strings.Contains(","+tail[2]+",", ",name=systemd,"):
			out["name=systemd"] = mp
		}
	}
	return out, sc.Err()
}

// removeCgroups removes each group and everything beneath it, killing any
// process still in them, and retries until limit: a group is removable
// only once its last process has been reaped.
func removeCgroups(dirs []string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var left []string
		for _, d := range dirs {
			if err := removeCgroup(d); err != nil {
				left = append(left, fmt.Sprintf("%s: %v", d, err))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups not removed within %s: %s", limit, strings.Join(left, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroup kills every process in the group at dir and its children,
// then removes them, deepest first.
func removeCgroup(dir string) error {
	var groups []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			groups = append(groups, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	sort.Slice(groups, func(i, j int) bool { return len(groups[i]) > len(groups[j]) })
	var firstErr error
	for _, g := range groups {
		if b, err := os.ReadFile(filepath.Join(g, "cgroup.procs")); err == nil {
			for _, s := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(s); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if err := syscall.Rmdir(g); err != nil && !errors.Is(err, fs.ErrNotExist) && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}
