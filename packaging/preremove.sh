#!/bin/sh
# preremove: run by the package manager before the package's files go
# (deb prerm, rpm %preun, apk pre-deinstall, Arch pre_remove). On a removal
# the service is stopped and disabled, since its launcher is about to
# disappear. On an upgrade (deb "upgrade", rpm's count of remaining
# installs) nothing is done: the host stands aside for the new version by
# itself, between reconciles.
#
# The version directories and /var/lib/mesh-host stay: see postinstall.
# To wipe a machine after removing the package:
#   rm -rf /opt/mesh-host /var/lib/mesh-host /etc/mesh-host
set -eu
case ${1:-} in
upgrade | failed-upgrade | [1-9] | [1-9][0-9])
	exit 0
	;;
esac
root=${DPKG_ROOT:-}
if [ -z "${root%/}" ] && command -v systemctl >/dev/null 2>&1; then
	if [ -d /run/systemd/system ]; then
		systemctl stop mesh-host.service || true
	fi
	systemctl disable mesh-host.service || true
fi
