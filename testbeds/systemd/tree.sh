# The systemd test tree's recipe: run as `chroot TREE /bin/sh -s` once
# debootstrap has made TREE (bookworm, minbase, systemd, systemd-sysv,
# dbus). Package systemd hashes this file into the tree's name, so that a
# change here builds a new tree.
set -eu
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

# A web server for the package driver to install, offline: its .debs and
# those of everything it needs that is not installed (recommends too, as
# a plain apt-get install would take them) in a local repository, which is
# the tree's only apt source. Without the network, apt-get update and
# apt-get install both work; the web server is not installed.
repo=/srv/mesh-bed-apt
apt-get clean
printf 'deb http://deb.debian.org/debian bookworm main\n' >/etc/apt/sources.list
apt-get update -q
apt-get install -q -y --download-only lighttpd
mkdir -p "$repo"
mv /var/cache/apt/archives/*.deb "$repo/"
cd "$repo"
for f in *.deb; do
	dpkg-deb --field "$f"
	printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$f" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d ' ' -f 1)"
done >Packages
cd /
printf 'deb [trusted=yes] file:%s ./\n' "$repo" >/etc/apt/sources.list
rm -rf /var/lib/apt/lists/*
apt-get update -q
apt-get install -q -y --simulate lighttpd >/dev/null
apt-get clean

# debootstrap copied the building machine's name: without it, the
# container's name (systemd-nspawn --machine) is its hostname.
rm -f /etc/hostname
# No apt run of its own in the middle of a test, holding dpkg's lock.
systemctl mask apt-daily.timer apt-daily-upgrade.timer
