// Command build makes mesh-host's release artifacts for Linux, for each
// architecture asked:
//
//	mesh-host-V-linux-ARCH           the binary
//	mesh-host_V_ARCH.deb, mesh-host-V-1.ARCH.rpm, mesh-host_V_ARCH.apk,
//	mesh-host-V-1-ARCH.pkg.tar.zst   the packages (made with nfpm)
//	mesh-host-V-linux-ARCH.tar.gz    the tarball: the floor, install.sh in it
//	mesh-host-V-linux-ARCH.release.tar.gz
//	                                 mesh-host alone, for `meshctl release`
//	SHA256SUMS
//
// (ARCH is the GOARCH in the binary's and the tarballs' names, and each
// package manager's own name for it in the packages'.)
//
// The binary is static and stripped (CGO_ENABLED=0, -trimpath, -s -w) with
// main.version set to V. Files in the archives carry one time,
// SOURCE_DATE_EPOCH or else the last commit's, so that building one commit
// twice gives the same release archive, and so the same version directory
// on the nodes (a version is named for the release archive's digest).
//
// Run from the module: go run ./packaging/build --version V --out dist/
//
// It is not the host's installer: what the packages and the tarball do on
// a machine is in package packaging's files, and the launcher in package
// upgrade.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
)

func main() { os.Exit(Main(os.Args[1:], os.Stdout, os.Stderr)) }

// Main runs the builder and returns its exit code: 0, 1 when the build
// failed, 2 for bad usage.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opt Options
	var arches string
	fs.StringVar(&opt.Version, "version", "", "the version to build, e.g. `git describe --always --dirty` (required)")
	fs.StringVar(&opt.Out, "out", "dist", "directory to write the artifacts to (created if missing)")
	fs.StringVar(&arches, "arch", defaultArch(), "comma-separated GOARCH values: amd64, arm64")
	fs.StringVar(&opt.Maintainer, "maintainer", DefaultMaintainer, "the packages' maintainer field")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "build: unexpected arguments: %s\n", strings.Join(fs.Args(), " "))
		return 2
	}
	if opt.Version == "" {
		fmt.Fprintln(stderr, "build: --version is required")
		return 2
	}
	for a := range strings.SplitSeq(arches, ",") {
		if a = strings.TrimSpace(a); a != "" {
			opt.Arches = append(opt.Arches, a)
		}
	}
	opt.Log = stdout
	if _, err := Build(ctx, opt); err != nil {
		fmt.Fprintf(stderr, "build: %v\n", err)
		if errors.Is(err, ErrUsage) {
			return 2
		}
		return 1
	}
	return 0
}

// defaultArch is this machine's architecture where mesh-host is built for
// it, else amd64.
func defaultArch() string {
	if _, ok := archNames[runtime.GOARCH]; ok {
		return runtime.GOARCH
	}
	return "amd64"
}
