// Package facts reads what the machine is: its name, OS, kernel, cores,
// memory, addresses and boot id, for the host.facts record the service
// journals when they change. Every read is best effort: a fact this
// machine does not give is left empty, never an error.
package facts

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/mesh-host/mesh-host/journal/event"
)

// Gather reads the machine's facts. The OS comes from os-release under
// root (the machine the host manages); the rest from the running kernel.
// version is the host's build label.
func Gather(root, version string) event.HostFactsPayload {
	f := event.HostFactsPayload{Arch: runtime.GOARCH, Cores: runtime.NumCPU(), Version: version}
	f.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		f.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	f.OSID, f.OSVersion = osRelease(root)
	f.MemoryMB = memoryMB()
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		f.BootID = strings.TrimSpace(string(b))
	}
	f.Addresses = addresses()
	return f
}

// osRelease reads ID and VERSION_ID from root's os-release.
func osRelease(root string) (id, version string) {
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := readInRoot(root, p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), "=")
			if !ok {
				continue
			}
			if u, err := strconv.Unquote(v); err == nil {
				v = u
			}
			switch k {
			case "ID":
				id = v
			case "VERSION_ID":
				version = v
			}
		}
		return bounded(id), bounded(version)
	}
	return "", ""
}

// maxRelease bounds what is read of an os-release file, which is a few
// hundred bytes.
const maxRelease = 64 << 10

// maxFact bounds an OS fact read from the machine's files: the record
// and every report carry it.
const maxFact = 128

// bounded is s cut to maxFact bytes, and to whole characters.
func bounded(s string) string {
	if len(s) > maxFact {
		s = s[:maxFact]
	}
	return strings.ToValidUTF8(s, "")
}

// readInRoot reads the regular file p beneath root as the machine would,
// symlinks resolved as if root were / (etc/os-release is a symlink to
// ../usr/lib/os-release on most systems), so that no symlink in root
// leads out of it. A FIFO or a device is not read (a FIFO would hold the
// service), nor more than maxRelease bytes. Without openat2 (Linux before
// 5.6), only root / is read, where no path leads out.
func readInRoot(root, p string) ([]byte, error) {
	flags := unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	dir, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat2(dir, p, &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	unix.Close(dir)
	if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) { // no openat2, or a seccomp filter refusing it
		if filepath.Clean(root) != "/" {
			return nil, err
		}
		fd, err = unix.Open("/"+p, flags, 0)
	}
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", p)
	}
	return io.ReadAll(io.LimitReader(f, maxRelease))
}

// memoryMB is MemTotal from /proc/meminfo, in MiB.
func memoryMB() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

// addresses are the machine's global unicast addresses, sorted: loopback
// and link-local ones say nothing about where the machine is.
func addresses() []string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if ok && ipn.IP.IsGlobalUnicast() {
			out = append(out, ipn.IP.String())
		}
	}
	slices.Sort(out)
	if len(out) > maxAddresses {
		out = out[:maxAddresses]
	}
	return out
}

// maxAddresses bounds the addresses a host reports: a machine holding
// thousands (a load balancer's) would make every report and host.facts
// record as large.
const maxAddresses = 64
