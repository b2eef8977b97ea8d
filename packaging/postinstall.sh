#!/bin/sh
# postinstall: run by the package manager after the package's files are in
# place, on a first install and on every upgrade (deb postinst, rpm %post,
# apk post-install and post-upgrade, Arch post_install and post_upgrade).
#
# The shipped binary, /usr/lib/mesh-host/mesh-host, becomes a host version:
# a copy in /opt/mesh-host/versions/SHA256/ with its arrival marker, unless
# that version is already there. The version directories are not the
# package's files: an upgrade adds the new version beside the running one
# and its predecessor, which a rollback needs, and never deletes them; a
# removal leaves them too (and /var/lib/mesh-host), since they may hold the
# version that is running. The running host notices the new version and
# stands aside for it between reconciles: nothing here restarts the unit,
# which might stop a host in the middle of an apply (it may be the host
# itself that is upgrading this package).
#
# DPKG_ROOT is honoured, so that dpkg --root --force-script-chrootless can
# install into another root (the tests do).
set -eu
root=${DPKG_ROOT:-}
root=${root%/}
lib=$root/usr/lib/mesh-host

first=no
if [ ! -d "$root/var/lib/mesh-host" ]; then
	first=yes
fi
install -d -m 0755 "$root/opt/mesh-host" "$root/opt/mesh-host/versions" "$root/etc/mesh-host"
install -d -m 0700 "$root/var/lib/mesh-host"

version=$(sh "$lib/arrive" "$lib/mesh-host" "$root/opt/mesh-host/versions")
echo "mesh-host: version $version is in /opt/mesh-host/versions/$version"

if [ -z "$root" ] && command -v systemctl >/dev/null 2>&1; then
	if [ -d /run/systemd/system ]; then
		systemctl daemon-reload || true
	fi
	# Enabled on the first install only: an operator who disabled the
	# unit keeps it disabled across upgrades.
	if [ "$first" = yes ]; then
		systemctl enable mesh-host.service || true
	fi
fi
if [ "$first" = yes ]; then
	echo "mesh-host: next: mesh-host enrol TOKEN (the token 'meshctl enrol NODE' prints), then: systemctl restart mesh-host"
fi
