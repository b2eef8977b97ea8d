#!/bin/sh
# arrive BINARY VERSIONS-DIR
#
# Puts a mesh-host binary into VERSIONS-DIR as a host version, the way the
# launcher expects to find one, and prints the version's name. The name is
# the binary's sha256, so installing the same binary twice is one version;
# a version already there (with its arrival marker) is left as it is.
#
# A version directory counts only once it holds an executable mesh-host and
# the arrival marker ".mesh-host-arrived": one line, the time in RFC 3339
# UTC with nine fraction digits, a space, and a counter one greater than the
# greatest counter among its sibling directories (the archive driver writes
# the same marker for versions the mesh delivers). The launcher starts the
# version with the greatest counter, so the marker is written last, after
# the directory is in place under its final name: a directory caught half
# made is never started.
#
# Shared by the tarball's install.sh and the packages' postinstall, which
# both ship it as /usr/lib/mesh-host/arrive. POSIX sh and coreutils only
# (sha256sum, mktemp, date): the tarball path never acquires a dependency.
set -eu

if [ $# -ne 2 ]; then
	echo "usage: arrive BINARY VERSIONS-DIR" >&2
	exit 2
fi
bin=$1
versions=$2

if [ ! -f "$bin" ]; then
	echo "arrive: $bin: no such file" >&2
	exit 1
fi
if [ ! -d "$versions" ]; then
	echo "arrive: $versions: no such directory" >&2
	exit 1
fi

digest() {
	sum=$(sha256sum "$1")
	printf '%s\n' "${sum%% *}"
}

version=$(digest "$bin")
case $version in
*[!0-9a-f]* | "")
	echo "arrive: sha256sum printed no digest for $bin" >&2
	exit 1
	;;
esac
dir=$versions/$version
marker=.mesh-host-arrived

if [ -d "$dir" ]; then
	if [ -f "$dir/$marker" ] && [ -x "$dir/mesh-host" ] && [ "$(digest "$dir/mesh-host")" = "$version" ]; then
		printf '%s\n' "$version"
		exit 0
	fi
	# Half made (no marker) or damaged: no launcher starts it as it is, so
	# it is made again rather than trusted.
	rm -rf "$dir"
fi

# Staged under a dot name, which is no version (the launcher and the
# counter below look at directories without a leading dot only).
stage=$(mktemp -d "$versions/.mesh-host-arrive-XXXXXX")
trap 'rm -rf "$stage"' EXIT
cp "$bin" "$stage/mesh-host"
chmod 0755 "$stage/mesh-host"
chmod 0755 "$stage"
# The binary is on disk before a marker can say it arrived.
sync "$stage/mesh-host" 2>/dev/null || sync
mv "$stage" "$dir"
trap - EXIT

greatest=0
for m in "$versions"/*/"$marker"; do
	[ -f "$m" ] || continue
	counter=
	read -r _ counter <"$m" || true
	# 1 to 18 digits, as the launcher reads them: what sh compares.
	case $counter in
	"" | *[!0-9]*) continue ;;
	esac
	[ "${#counter}" -le 18 ] || continue
	if [ "$counter" -gt "$greatest" ]; then
		greatest=$counter
	fi
done

# %N (nanoseconds) is GNU date's; where date lacks it, the time is whole
# seconds. The time is for people: the counter orders versions.
now=$(date -u +%Y-%m-%dT%H:%M:%S.%N)
case ${now##*.} in
[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9]) ;;
*) now=${now%.*}.000000000 ;;
esac
printf '%sZ %s\n' "$now" $((greatest + 1)) >"$dir/$marker.tmp"
mv "$dir/$marker.tmp" "$dir/$marker"
printf '%s\n' "$version"
