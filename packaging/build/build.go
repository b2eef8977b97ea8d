package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/apk"
	"github.com/goreleaser/nfpm/v2/arch"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"

	"github.com/mesh-host/mesh-host/packaging"
	"github.com/mesh-host/mesh-host/upgrade"
)

// ErrUsage is returned for options the builder cannot take: no version,
// an architecture it does not build for.
var ErrUsage = errors.New("bad usage")

// DefaultMaintainer is the packages' maintainer field unless told. The
// address is in the reserved .invalid domain: there is no list to write to
// yet.
const DefaultMaintainer = "mesh-host maintainers <maintainers@mesh-host.invalid>"

// archNames are the architectures mesh-host is packaged for (the design:
// Linux first, amd64 and arm64), by GOARCH. nfpm names each in its own
// packager's terms.
var archNames = map[string]bool{"amd64": true, "arm64": true}

// Options say what to build.
type Options struct {
	// Version is the version the binary reports (main.version) and the
	// artifacts' names carry; packages carry it as their package manager
	// can read it (see packageVersion).
	Version string
	// Out is the directory the artifacts go to; it is created if missing.
	Out string
	// Arches are GOARCH values; empty means amd64.
	Arches []string
	// Maintainer is the packages' maintainer field (DefaultMaintainer).
	Maintainer string
	// ModTime is the time every file in every archive carries; zero means
	// SOURCE_DATE_EPOCH, else the last commit's time, else the Unix epoch.
	ModTime time.Time
	// Log, if not nil, is told each artifact as it is written.
	Log io.Writer
}

// Artifacts are what one architecture's build wrote, by path.
type Artifacts struct {
	Arch      string
	Binary    string // the built binary (in a directory under Out, "bin-ARCH")
	Deb       string
	RPM       string
	APK       string
	ArchLinux string // the Arch Linux package
	Tarball   string
	Release   string // mesh-host alone, tar.gz, for meshctl release
}

// All lists the artifacts.
func (a Artifacts) All() []string {
	return []string{a.Binary, a.Deb, a.RPM, a.APK, a.ArchLinux, a.Tarball, a.Release}
}

// Build builds the binary for each architecture and packs it every way.
func Build(ctx context.Context, opt Options) ([]Artifacts, error) {
	if opt.Version == "" {
		return nil, fmt.Errorf("%w: no version", ErrUsage)
	}
	if len(opt.Arches) == 0 {
		opt.Arches = []string{"amd64"}
	}
	for _, a := range opt.Arches {
		if !archNames[a] {
			return nil, fmt.Errorf("%w: architecture %q: mesh-host is packaged for amd64 and arm64", ErrUsage, a)
		}
	}
	if opt.Maintainer == "" {
		opt.Maintainer = DefaultMaintainer
	}
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	module, err := moduleDir(ctx)
	if err != nil {
		return nil, err
	}
	if opt.ModTime.IsZero() {
		if opt.ModTime, err = modTime(ctx, module); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp("", "mesh-host-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)
	scripts, err := writeScripts(stage)
	if err != nil {
		return nil, err
	}

	var all []Artifacts
	var sums []string
	for _, goarch := range opt.Arches {
		a, err := buildArch(ctx, opt, module, goarch, filepath.Join(stage, goarch), scripts)
		if err != nil {
			return nil, err
		}
		all = append(all, a)
		for _, p := range a.All() {
			sum, err := upgrade.FileDigest(p)
			if err != nil {
				return nil, err
			}
			sums = append(sums, sum+"  "+filepath.Base(p)+"\n")
		}
	}
	sumsPath := filepath.Join(opt.Out, "SHA256SUMS")
	if err := os.WriteFile(sumsPath, []byte(strings.Join(sums, "")), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(opt.Log, "wrote %s\n", sumsPath)
	return all, nil
}

// scriptFiles are the maintainer scripts written out for nfpm, which
// reads them from files.
type scriptFiles struct {
	postInstall, preRemove string
}

func writeScripts(dir string) (scriptFiles, error) {
	s := scriptFiles{postInstall: filepath.Join(dir, "postinstall.sh"), preRemove: filepath.Join(dir, "preremove.sh")}
	if err := os.WriteFile(s.postInstall, packaging.PostInstall, 0o755); err != nil {
		return s, err
	}
	return s, os.WriteFile(s.preRemove, packaging.PreRemove, 0o755)
}

// buildArch builds and packs for goarch, staging what nfpm reads from
// files in src.
func buildArch(ctx context.Context, opt Options, module, goarch, src string, scripts scriptFiles) (Artifacts, error) {
	a := Artifacts{Arch: goarch}
	base := fmt.Sprintf("mesh-host-%s-linux-%s", opt.Version, goarch)
	a.Binary = filepath.Join(opt.Out, base)
	if err := goBuild(ctx, module, goarch, opt.Version, a.Binary); err != nil {
		return a, err
	}
	bin, err := os.ReadFile(a.Binary)
	if err != nil {
		return a, err
	}
	fmt.Fprintf(opt.Log, "built %s (%d bytes)\n", a.Binary, len(bin))

	// The files a package puts on the machine, written where nfpm reads
	// them.
	if err := os.MkdirAll(src, 0o755); err != nil {
		return a, err
	}
	for name, b := range map[string][]byte{"launcher": upgrade.Launcher, "arrive": packaging.Arrive, "mesh-host.service": packaging.Unit} {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			return a, err
		}
	}
	for _, p := range []struct {
		name   string
		packer nfpm.Packager
		out    *string
	}{
		{"deb", deb.Default, &a.Deb},
		{"rpm", rpm.DefaultRPM, &a.RPM},
		{"apk", apk.Default, &a.APK},
		{"archlinux", arch.Default, &a.ArchLinux},
	} {
		info := packageInfo(opt, goarch, a.Binary, src, scripts)
		*p.out = filepath.Join(opt.Out, p.packer.ConventionalFileName(info))
		if err := writePackage(p.packer, info, *p.out); err != nil {
			return a, fmt.Errorf("%s package: %w", p.name, err)
		}
		fmt.Fprintf(opt.Log, "wrote %s\n", *p.out)
	}

	a.Tarball = filepath.Join(opt.Out, base+".tar.gz")
	err = writeTarGz(a.Tarball, opt.ModTime, []tarFile{
		{base + "/", nil, 0o755},
		{base + "/mesh-host", bin, 0o755},
		{base + "/launcher", upgrade.Launcher, 0o755},
		{base + "/arrive", packaging.Arrive, 0o755},
		{base + "/mesh-host.service", packaging.Unit, 0o644},
		{base + "/install.sh", packaging.InstallScript, 0o755},
	})
	if err != nil {
		return a, err
	}
	fmt.Fprintf(opt.Log, "wrote %s\n", a.Tarball)

	a.Release = filepath.Join(opt.Out, base+".release.tar.gz")
	if err := writeTarGz(a.Release, opt.ModTime, []tarFile{{"mesh-host", bin, 0o755}}); err != nil {
		return a, err
	}
	fmt.Fprintf(opt.Log, "wrote %s\n", a.Release)
	return a, nil
}

// goBuild builds cmd/mesh-host as the packages ship it: static (no cgo:
// the tarball path may not depend on a C library), without the builder's
// paths, stripped.
func goBuild(ctx context.Context, module, goarch, version, out string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X main.version="+version,
		"-o", abs, "./cmd/mesh-host")
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/mesh-host for linux/%s: %w\n%s", goarch, err, out)
	}
	return nil
}

// moduleDir is the directory of the module this builder belongs to, asked
// of the go command so that it works from any directory inside it.
func moduleDir(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("%w: run the builder inside the mesh-host module", ErrUsage)
	}
	return filepath.Dir(gomod), nil
}

// modTime is SOURCE_DATE_EPOCH, else the time of the module's last commit,
// else the epoch: a time that does not change between two builds of one
// commit.
func modTime(ctx context.Context, module string) (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: SOURCE_DATE_EPOCH=%q is not a number of seconds", ErrUsage, s)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	cmd := exec.CommandContext(ctx, "git", "log", "-1", "--format=%ct")
	cmd.Dir = module
	if out, err := cmd.Output(); err == nil {
		if n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
			return time.Unix(n, 0).UTC(), nil
		}
	}
	return time.Unix(0, 0).UTC(), nil
}

// packageInfo describes the package for nfpm. Each packager gets an Info
// of its own, since nfpm prepares the contents in place.
func packageInfo(opt Options, goarch, binary, src string, scripts scriptFiles) *nfpm.Info {
	version, prerelease := packageVersion(opt.Version)
	info := &nfpm.Info{
		Name:        "mesh-host",
		Arch:        goarch,
		Platform:    "linux",
		Version:     version,
		Prerelease:  prerelease,
		Maintainer:  opt.Maintainer,
		Description: "The host of a mesh node: holds this machine in the state its mesh declares.\nOne static binary, its launcher (which starts the newest delivered version\nand rolls back once) and a systemd unit.",
		Section:     "admin",
		Priority:    "optional",
		MTime:       opt.ModTime,
		Overridables: nfpm.Overridables{
			Contents: files.Contents{
				file(binary, packaging.BinaryPath, 0o755, opt.ModTime),
				file(filepath.Join(src, "launcher"), packaging.LauncherPath, 0o755, opt.ModTime),
				file(filepath.Join(src, "arrive"), packaging.ArrivePath, 0o755, opt.ModTime),
				file(filepath.Join(src, "mesh-host.service"), packaging.PackageUnitPath, 0o644, opt.ModTime),
				// Relative, as install.sh makes it, so that it holds in any root.
				{Source: "../lib/mesh-host/mesh-host", Destination: packaging.CommandPath, Type: files.TypeSymlink},
			},
			Scripts: nfpm.Scripts{PostInstall: scripts.postInstall, PreRemove: scripts.preRemove},
			// apk and pacman run a separate script on upgrade: the same
			// one, so that an upgrade brings its version too.
			APK:       nfpm.APK{Scripts: nfpm.APKScripts{PostUpgrade: scripts.postInstall}},
			ArchLinux: nfpm.ArchLinux{Scripts: nfpm.ArchLinuxScripts{PostUpgrade: scripts.postInstall}},
			RPM:       nfpm.RPM{BuildHost: "mesh-host-build", Summary: "The host of a mesh node"},
		},
	}
	// The version schema is ours (packageVersion split it already).
	info.VersionSchema = "none"
	return nfpm.WithDefaults(info)
}

func file(src, dst string, mode os.FileMode, mtime time.Time) *files.Content {
	return &files.Content{Source: src, Destination: dst, Type: files.TypeFile,
		FileInfo: &files.ContentFileInfo{Owner: "root", Group: "root", Mode: mode, MTime: mtime}}
}

var releaseVersion = regexp.MustCompile(`^v?([0-9]+(?:\.[0-9]+)*)(?:-([0-9A-Za-z.]+))?$`)

// packageVersion turns the build's version into one every package manager
// reads: "v1.2.3" and "1.2.3-rc1" keep their numbers (the part after "-"
// becomes a pre-release, sorting before the release); anything else, such
// as `git describe --always --dirty`'s "72ff2ff-dirty", becomes 0.0.0 with
// a pre-release "git72ff2ffdirty", which deb and rpm sort before any
// release. (apk wants digits after "_git", so such a package is for
// testing, not for an apk repository.) The binary reports the version as
// given.
func packageVersion(v string) (version, prerelease string) {
	if m := releaseVersion.FindStringSubmatch(v); m != nil {
		return m[1], m[2]
	}
	var b strings.Builder
	for _, r := range v {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' {
			b.WriteRune(r)
		}
	}
	return "0.0.0", "git" + b.String()
}

func writePackage(p nfpm.Packager, info *nfpm.Info, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	info.Target = path
	if err := p.Package(info, f); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// tarFile is an entry of a tar archive: a name ending in "/" is a
// directory.
type tarFile struct {
	name string
	data []byte
	mode int64
}

// writeTarGz writes a tar.gz of files owned by root, all at mtime, with no
// name or time in the gzip header: the same files give the same bytes.
func writeTarGz(path string, mtime time.Time, entries []tarFile) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}
