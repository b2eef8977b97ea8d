// Package facts reads what the machine is: its name, OS, kernel, cores,
// memory, addresses and boot id, for the host.facts record the service
// journals when they change. Every read is best effort: a fact this
// machine does not give is left empty, never an error.
package facts

import (
	"bufio"
	"bytes"
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
		b, err := os.ReadFile(filepath.Join(root, p))
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
		return id, version
	}
	return "", ""
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
	return out
}
