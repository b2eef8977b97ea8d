#!/bin/sh
# install.sh [--prefix DIR]
#
# Installs mesh-host from the unpacked tarball this script came in: the
# floor under the packages, needing nothing but POSIX sh and coreutils.
#
#   PREFIX/usr/lib/mesh-host/mesh-host     the shipped binary
#   PREFIX/usr/lib/mesh-host/launcher      what the unit runs
#   PREFIX/usr/lib/mesh-host/arrive        puts a binary into versions/
#   PREFIX/usr/bin/mesh-host               -> ../lib/mesh-host/mesh-host
#   PREFIX/opt/mesh-host/versions/SHA256/  the binary as the first version
#   PREFIX/etc/systemd/system/mesh-host.service
#   PREFIX/var/lib/mesh-host               state, root only (0700)
#   PREFIX/etc/mesh-host
#
# PREFIX is / unless --prefix says otherwise (another root, for tests and
# images). The unit is enabled with systemctl only when PREFIX is / and
# systemctl is there; it is not started: a host joins its mesh first.
# Running it again installs again; a version already in versions/ stays.
set -eu

usage() {
	echo "usage: install.sh [--prefix DIR]"
}

prefix=/
while [ $# -gt 0 ]; do
	case $1 in
	--prefix)
		[ $# -ge 2 ] || {
			usage >&2
			exit 2
		}
		prefix=$2
		shift 2
		;;
	--prefix=*)
		prefix=${1#--prefix=}
		shift
		;;
	-h | --help)
		usage
		exit 0
		;;
	*)
		echo "install.sh: unknown argument: $1" >&2
		usage >&2
		exit 2
		;;
	esac
done
case $prefix in
/*) ;;
*)
	echo "install.sh: --prefix must be an absolute path, not $prefix" >&2
	exit 2
	;;
esac
# "/" becomes "", so that paths below read $root/usr/... either way.
root=${prefix%/}

here=$(cd "$(dirname "$0")" && pwd)
for f in mesh-host launcher arrive mesh-host.service; do
	if [ ! -f "$here/$f" ]; then
		echo "install.sh: $here/$f is missing: run install.sh from the unpacked tarball" >&2
		exit 1
	fi
done

lib=$root/usr/lib/mesh-host
install -d -m 0755 "$lib" "$root/usr/bin" "$root/opt/mesh-host" "$root/opt/mesh-host/versions" \
	"$root/etc/systemd/system" "$root/etc/mesh-host"
install -d -m 0700 "$root/var/lib/mesh-host"
install -m 0755 "$here/mesh-host" "$lib/mesh-host"
install -m 0755 "$here/launcher" "$lib/launcher"
install -m 0755 "$here/arrive" "$lib/arrive"
install -m 0644 "$here/mesh-host.service" "$root/etc/systemd/system/mesh-host.service"
ln -sf ../lib/mesh-host/mesh-host "$root/usr/bin/mesh-host"

version=$(sh "$lib/arrive" "$lib/mesh-host" "$root/opt/mesh-host/versions")
echo "installed mesh-host version $version in $root/opt/mesh-host/versions/$version"

if [ -z "$root" ] && command -v systemctl >/dev/null 2>&1; then
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload
	fi
	systemctl enable mesh-host.service
	echo "enabled mesh-host.service"
else
	echo "not enabled: systemctl enable mesh-host.service is for the machine that boots $prefix"
fi
echo "next: mesh-host enrol TOKEN (the token 'meshctl enrol NODE' prints), then: systemctl restart mesh-host"
