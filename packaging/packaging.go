// Package packaging is what installs mesh-host on a machine, besides the
// binary and the launcher (package upgrade's): the systemd unit, the
// tarball's install.sh, the packages' maintainer scripts, and the arrive
// helper both paths use to put the shipped binary into
// /opt/mesh-host/versions as a host version.
//
// The files are kept as they are installed, beside this file, so that they
// can be read, linted and run as they are; this package embeds them for
// the builder (packaging/build), which makes the .deb, .rpm, .apk and Arch
// packages and the tarball. It holds no logic: what the files do is said in
// each file.
//
// On a machine, both install paths lay out the same files:
//
//	/usr/lib/mesh-host/mesh-host   the shipped binary (package-owned)
//	/usr/lib/mesh-host/launcher    what the unit runs (package-owned)
//	/usr/lib/mesh-host/arrive      puts a binary into versions/ (package-owned)
//	/usr/bin/mesh-host             -> ../lib/mesh-host/mesh-host, for the CLI
//	/opt/mesh-host/versions/SHA256 host versions: never package-owned
//	/var/lib/mesh-host             state, 0700: never package-owned
//	/etc/mesh-host
//
// The unit is /usr/lib/systemd/system/mesh-host.service from a package and
// /etc/systemd/system/mesh-host.service from the tarball.
package packaging

import _ "embed"

// Unit is the systemd unit, mesh-host.service. It runs the launcher at
// LauncherPath.
//
//go:embed mesh-host.service
var Unit []byte

// InstallScript is the tarball's install.sh.
//
//go:embed install.sh
var InstallScript []byte

// Arrive is the helper both install paths ship as ArrivePath: "arrive
// BINARY VERSIONS-DIR" puts the binary into VERSIONS-DIR as a version with
// its arrival marker, unless that version is already there.
//
//go:embed arrive.sh
var Arrive []byte

// PostInstall is the packages' post-install (and post-upgrade) script.
//
//go:embed postinstall.sh
var PostInstall []byte

// PreRemove is the packages' pre-removal script.
//
//go:embed preremove.sh
var PreRemove []byte

// Where things are installed on a machine.
const (
	LibDir       = "/usr/lib/mesh-host"
	BinaryPath   = LibDir + "/mesh-host"
	LauncherPath = LibDir + "/launcher"
	ArrivePath   = LibDir + "/arrive"
	// UnitName is the unit's name, which no declaration may name.
	UnitName = "mesh-host.service"
	// PackageUnitPath is where a package puts the unit; the tarball puts
	// it in /etc/systemd/system, which is the administrator's.
	PackageUnitPath = "/usr/lib/systemd/system/" + UnitName
	// CommandPath is the symlink that puts the shipped binary on PATH.
	CommandPath = "/usr/bin/mesh-host"
	VersionsDir = "/opt/mesh-host/versions"
	StateDir    = "/var/lib/mesh-host"
	ConfigDir   = "/etc/mesh-host"
	// ArrivedFile is the arrival marker inside a version directory.
	ArrivedFile = ".mesh-host-arrived"
	// PackageName is the host's package, which no declaration may name.
	PackageName = "mesh-host"
)

// InstalledPaths are the installation's own directories and files, as both
// install paths lay them out: no declaration may write at or under one.
// (The unit's files are refused by name, wherever they are; the versions
// directory is written by release archives only.)
func InstalledPaths() []string {
	return []string{StateDir, ConfigDir, LibDir, CommandPath}
}
