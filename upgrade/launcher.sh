#!/bin/sh
# mesh-host launcher: the service's main process. It starts the newest
# delivered mesh-host version, starts again whatever is newest when the host
# stands aside (exit 0), rolls back once to the known-good version when a
# version will not start, and halts when that fails too: then the machine,
# not the binary, is the problem. It is a script shipped with the package,
# not a host subcommand, because a binary that cannot start cannot be its
# own recovery. It needs nothing but a POSIX sh and its utilities.
#
# Usage:
#   launcher [GLOBAL-FLAG...] [-- SERVE-FLAG...]
# runs
#   VERSIONS/NAME/mesh-host --state-dir STATE-DIR GLOBAL-FLAG... serve SERVE-FLAG...
# e.g. `launcher --root /srv/x -- --drift-interval 5m`. Global flags (--root,
# --versions, --parallel, ...) go before `--`, serve's own after it. The
# state directory comes from MESH_HOST_STATE_DIR, never from a --state-dir
# argument: the launcher keeps its own state there too.
#
# Environment (the unit sets them):
#   MESH_HOST_VERSIONS       the versions directory as this machine sees it:
#                            ROOT + the host's --versions
#                            (default /opt/mesh-host/versions)
#   MESH_HOST_STATE_DIR      the host's state directory (default /var/lib/mesh-host)
#   MESH_HOST_FAILURE_LIMIT  consecutive failed starts before a rollback (default 3)
#   MESH_HOST_RESTART_DELAY  seconds between the starts of a failing version,
#                            or of a version that stood aside for nothing
#                            newer (default 2)
#
# A version is VERSIONS/NAME holding an executable mesh-host and the arrival
# marker .mesh-host-arrived ("TIME COUNTER", written last by the archive
# driver); anything else there is ignored. The newest is the greatest
# counter (ties: the name sorting first). The known-good version is named by
# STATE-DIR/known-good, which the host writes once a version has completed a
# reconcile.
#
# What it does with an exit of the host:
#   0         the host stood aside for a newer version: start what is newest now
#   4         the host's journal is damaged: halt at once (exit 78) with the
#             host's recovery message in its log; the version is not at
#             fault, so nothing is counted, marked bad or rolled back
#   non-zero  a failed start: count it in STATE-DIR/launcher/failures
#             ("VERSION COUNT"); below the limit start it again. At the
#             limit, if a known-good version other than it is on disk, roll
#             back: mark it in STATE-DIR/launcher/bad ("VERSION EXIT-CODE"; it
#             is not started again until a newer version arrives), append
#             "rolled-back FROM TO EXIT-CODE REASON" to
#             STATE-DIR/launcher/decision (the host journals it as
#             version.rolled-back and removes the file), and start the
#             known-good version with one chance left. Otherwise halt.
# The host removes the failures file once its start has completed a
# reconcile: that start was not a failed one. Remove the launcher's files to
# start afresh after a halt.
#
# Exit status:
#   0   stopped by SIGTERM, SIGINT or SIGHUP (forwarded to the host as SIGTERM)
#   1   no version to start, or the state directory cannot be made
#   78  halted (EX_CONFIG; the unit's RestartPreventExitStatus=): the
#       known-good version failed too, or the version that failed has no
#       known-good version to roll back to. The message names the machine,
#       the versions and their exit codes; it is also appended to
#       STATE-DIR/launcher/decision as "halted FAILED OTHER EXIT-CODE
#       MESSAGE" (OTHER: the version rolled back from, else FAILED), which
#       the host's next start journals as version.halted.
#
# Keep in step with package upgrade (upgrade.go), which reads and writes the
# same files by the same rules.

set -u

versions=${MESH_HOST_VERSIONS:-/opt/mesh-host/versions}
state=${MESH_HOST_STATE_DIR:-/var/lib/mesh-host}
limit=${MESH_HOST_FAILURE_LIMIT:-3}
delay=${MESH_HOST_RESTART_DELAY:-2}
ldir=$state/launcher
halt_status=78
damaged_status=4

say() {
	printf 'mesh-host launcher: %s\n' "$*" >&2
}

# is_count N: N is 1 to 18 decimal digits (what sh arithmetic compares).
is_count() {
	case $1 in '' | *[!0-9]*) return 1 ;; esac
	[ "${#1}" -le 18 ]
}

# valid_name NAME: NAME can be a version's name.
valid_name() {
	case $1 in '' | .* | *[!A-Za-z0-9._+-]*) return 1 ;; esac
	[ "${#1}" -le 255 ]
}

case $limit in '' | 0 | *[!0-9]*)
	say "MESH_HOST_FAILURE_LIMIT=$limit is not a positive number; using 3"
	limit=3
	;;
esac
case $delay in '' | *[!0-9]*)
	say "MESH_HOST_RESTART_DELAY=$delay is not a number of seconds; using 2"
	delay=2
	;;
esac

# counter NAME: print the arrival counter of version NAME; false when NAME
# is not a version (half-delivered, a symlink, a bad name or marker).
counter() {
	valid_name "$1" || return 1
	c_dir=$versions/$1
	[ -d "$c_dir" ] && [ ! -L "$c_dir" ] || return 1
	[ -f "$c_dir/mesh-host" ] && [ ! -L "$c_dir/mesh-host" ] && [ -x "$c_dir/mesh-host" ] || return 1
	[ -f "$c_dir/.mesh-host-arrived" ] && [ ! -L "$c_dir/.mesh-host-arrived" ] || return 1
	c_time='' c_count='' c_rest=''
	# A marker without a final newline still sets the fields.
	read -r c_time c_count c_rest 2>/dev/null <"$c_dir/.mesh-host-arrived" || :
	[ -n "$c_time" ] && [ -z "$c_rest" ] && is_count "$c_count" || return 1
	printf '%s\n' "$c_count"
}

# newest: set nv to the newest version's name; false when there is none. The glob is sorted bytewise (LC_ALL=C in the
# subshell), and of equal counters the first seen is kept.
newest() {
	nv=''
	n_out=$(
		LC_ALL=C
		best='' bestc=''
		for d in "$versions"/*; do
			name=${d##*/}
			c=$(counter "$name") || continue
			if [ -z "$bestc" ] || [ "$c" -gt "$bestc" ]; then
				best=$name bestc=$c
			fi
		done
		[ -n "$best" ] && printf '%s\n' "$best"
	) || return 1
	nv=$n_out
	[ -n "$nv" ]
}

# field1 FILE / field2 FILE: the first or second field of FILE's first line.
field1() {
	f_a='' f_b=''
	[ -f "$1" ] && read -r f_a f_b 2>/dev/null <"$1"
	printf '%s' "$f_a"
}
field2() {
	f_a='' f_b=''
	[ -f "$1" ] && read -r f_a f_b 2>/dev/null <"$1"
	printf '%s' "${f_b%% *}"
}

# known_good: print the known-good version's name when it is a version on
# disk.
known_good() {
	k=$(field1 "$state/known-good")
	if valid_name "$k" && counter "$k" >/dev/null; then
		printf '%s' "$k"
	fi
}

# put FILE LINE: replace FILE with the one LINE, whole, and flush it.
put() {
	if printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"; then
		sync "$1" 2>/dev/null || sync 2>/dev/null || :
	else
		say "cannot write $1"
	fi
}

# add FILE LINE: append LINE to FILE and flush it.
add() {
	if printf '%s\n' "$2" >>"$1"; then
		sync "$1" 2>/dev/null || sync 2>/dev/null || :
	else
		say "cannot write $1"
	fi
}

# pick: set v to the version to start: the newest, unless the launcher
# rolled back from it (launcher/bad), then the known-good one. A bad mark
# for a version that is no longer the newest is forgotten.
pick() {
	newest || return 1
	v=$nv
	b=$(field1 "$ldir/bad")
	[ -n "$b" ] || return 0
	if [ "$b" != "$nv" ]; then
		rm -f "$ldir/bad"
		return 0
	fi
	kg=$(known_good)
	if [ -n "$kg" ]; then
		v=$kg
	fi
	return 0
}

child=''
stopping=''
on_signal() {
	stopping=$1
	if [ -n "$child" ]; then
		kill -s TERM "$child" 2>/dev/null || :
	fi
}
trap 'on_signal TERM' TERM
trap 'on_signal INT' INT
trap 'on_signal HUP' HUP

# pause: sleep between restarts, and still answer a signal at once.
pause() {
	[ "$delay" -gt 0 ] || return 0
	sleep "$delay" &
	child=$!
	wait "$child" 2>/dev/null || :
	kill "$child" 2>/dev/null || :
	child=''
}

# The arguments become GLOBAL-FLAG... serve SERVE-FLAG...: the first "--"
# turns into "serve", or "serve" goes last.
seen=''
for a in "$@"; do
	shift
	if [ -z "$seen" ] && [ "$a" = -- ]; then
		set -- "$@" serve
		seen=1
	else
		set -- "$@" "$a"
	fi
done
[ -n "$seen" ] || set -- "$@" serve

if ! (umask 077 && mkdir -p "$ldir"); then
	say "cannot make the state directory $ldir"
	exit 1
fi

while :; do
	[ -z "$stopping" ] || exit 0
	if ! pick; then
		say "no mesh-host version in $versions (a version is $versions/NAME/mesh-host with an arrival marker); nothing to start"
		exit 1
	fi
	exe=$versions/$v/mesh-host
	say "starting $v"
	"$exe" --state-dir "$state" "$@" &
	child=$!
	[ -z "$stopping" ] || kill -s TERM "$child" 2>/dev/null || :
	while :; do
		wait "$child"
		code=$?
		# A trapped signal interrupts wait; the host is still stopping.
		if [ -n "$stopping" ] && kill -0 "$child" 2>/dev/null; then
			continue
		fi
		break
	done
	child=''
	if [ -n "$stopping" ]; then
		say "stopped (SIG$stopping); $v exited with $code"
		exit 0
	fi

	if [ "$code" -eq 0 ]; then
		rm -f "$ldir/failures"
		was=$v
		if pick && [ "$v" = "$was" ]; then
			say "$was exited 0 and is still the version to run; starting it again"
			pause
		else
			say "$was stood aside"
		fi
		continue
	fi

	if [ "$code" -eq "$damaged_status" ]; then
		machine=$(uname -n 2>/dev/null || echo unknown)
		msg="HALT on machine $machine: $v found the journal damaged (exit code $code); no version is at fault and none is rolled back. Follow the recovery message the host logged, then restart the service."
		say "$msg"
		add "$ldir/decision" "halted $v $v $code $msg"
		exit "$halt_status"
	fi

	n=1
	if [ "$(field1 "$ldir/failures")" = "$v" ]; then
		prev=$(field2 "$ldir/failures")
		if is_count "$prev"; then
			n=$((prev + 1))
		fi
	fi
	put "$ldir/failures" "$v $n"
	if [ "$n" -lt "$limit" ]; then
		say "$v exited with $code: failed start $n of $limit; starting it again"
		pause
		continue
	fi

	kg=$(known_good)
	if [ -n "$kg" ] && [ "$kg" != "$v" ]; then
		reason="$v failed $n starts in a row, the last with exit code $code"
		put "$ldir/bad" "$v $code"
		add "$ldir/decision" "rolled-back $v $kg $code $reason"
		# The known-good version has one chance: its next failure halts.
		put "$ldir/failures" "$kg $((limit - 1))"
		say "rolling back to the known-good version $kg, once: $reason"
		continue
	fi

	machine=$(uname -n 2>/dev/null || echo unknown)
	b=$(field1 "$ldir/bad")
	bcode=$(field2 "$ldir/bad")
	other=$v
	if [ -n "$b" ] && [ "$b" != "$v" ]; then
		other=$b
		msg="HALT on machine $machine: the machine, not the binary, is the problem. Version $b failed (last exit code $bcode) and the known-good version $v failed too (exit code $code). Fix the machine, then remove $ldir/failures and restart the service."
	elif [ "$v" = "$kg" ]; then
		msg="HALT on machine $machine: the machine, not the binary, is the problem. The known-good version $v, the newest there is, failed $n starts in a row (last exit code $code); there is nothing to roll back to. Fix the machine, then remove $ldir/failures and restart the service."
	else
		msg="HALT on machine $machine: version $v failed $n starts in a row (last exit code $code) and no known-good version is on disk to roll back to. Remove $ldir/failures and restart the service once a version that starts is delivered."
	fi
	say "$msg"
	# Left for the host's next start to journal: a halt is a decision
	# about this machine like a rollback, and the journal keeps them all.
	add "$ldir/decision" "halted $v $other $code $msg"
	exit "$halt_status"
done
