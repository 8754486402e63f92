#!/usr/bin/env bash
# ensure-docker.sh — make sure a Docker daemon answers on the local socket.
#
# Idempotent: when a daemon already answers on /var/run/docker.sock (or on
# DOCKER_HOST when that is a unix socket) and /bin/busybox is statically
# linked, it does nothing. Otherwise it
#   1. installs Debian's docker.io with apt-get when dockerd is missing, and
#      busybox-static when /bin/busybox is missing or is not the static one
#      (the Docker tests build their image from it, and the image holds no
#      libraries: Debian's dynamically linked busybox package would give an
#      image whose applets cannot start),
#   2. picks a storage driver (overlay2 when /var/lib/docker sits on a
#      filesystem that supports it, vfs otherwise),
#   3. starts dockerd in the background, logging to $BERTH_DOCKERD_LOG
#      (default /var/log/berth-dockerd.log), and
#   4. waits up to $BERTH_DOCKERD_WAIT seconds (default 60) for it to answer,
#      failing loudly with the log tail otherwise.
#
# Networking: the default bridge with iptables is used when the kernel allows
# it (it does on the CI/dev VM). When it does not (no bridge or no iptables
# nat table) dockerd is started with --iptables=false --bridge=none; containers
# then only get `none` networking and berth's docker_network=true cannot give
# them a network — tests that need one skip with that reason.
#
# Must run as root. Safe to run concurrently (flock).
set -euo pipefail

SOCK=/var/run/docker.sock
if [[ "${DOCKER_HOST:-}" == unix://* ]]; then
	SOCK="${DOCKER_HOST#unix://}"
fi
LOG="${BERTH_DOCKERD_LOG:-/var/log/berth-dockerd.log}"
WAIT="${BERTH_DOCKERD_WAIT:-60}"

say() { echo "ensure-docker: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

answers() {
	[[ -S "$SOCK" ]] || return 1
	curl -fsS --max-time 3 --unix-socket "$SOCK" http://localhost/_ping >/dev/null 2>&1
}

# static_busybox: /bin/busybox exists and loads no shared libraries. glibc's
# ldd says "not a dynamic executable" (static) or "statically linked"
# (static-pie) for those.
static_busybox() {
	[[ -x /bin/busybox ]] || return 1
	local out
	out=$(LC_ALL=C ldd /bin/busybox 2>&1 || true)
	[[ $out == *"not a dynamic executable"* || $out == *"statically linked"* ]]
}

# Fast path: nothing to do.
if answers && static_busybox; then
	say "daemon already answers on $SOCK"
	exit 0
fi

LOCK=/var/lock/berth-ensure-docker.flock
exec 9>"$LOCK"
flock -w 300 9 || die "another ensure-docker.sh still holds $LOCK after 300s"

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
if ! static_busybox; then
	if [[ -e /bin/busybox ]]; then
		say "/bin/busybox is dynamically linked (Debian's busybox package?): installing busybox-static, which replaces it"
	fi
	need_pkgs+=(busybox-static)
fi
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
if ((${#need_pkgs[@]})); then
	[[ $(id -u) == 0 ]] || die "need root to install ${need_pkgs[*]}"
	say "installing ${need_pkgs[*]} with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || die "apt-get update failed"
	apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null ||
		die "apt-get install ${need_pkgs[*]} failed"
fi
static_busybox || die "/bin/busybox is still not statically linked after installing busybox-static (ldd: $(LC_ALL=C ldd /bin/busybox 2>&1 | head -n 3 | tr '\n' ' '))"

if answers; then
	say "daemon already answers on $SOCK"
	exit 0
fi
[[ $(id -u) == 0 ]] || die "no daemon on $SOCK and not root: cannot start dockerd"
command -v dockerd >/dev/null 2>&1 || die "dockerd not found after install"

args=(--host "unix://$SOCK")

# Storage driver: overlay2 needs a lower filesystem that supports it (ext4,
# xfs, btrfs...); /var/lib/docker on overlay/tmpfs cannot host it.
mkdir -p /var/lib/docker
fstype=$(stat -f -c %T /var/lib/docker 2>/dev/null || echo unknown)
if grep -qw overlay /proc/filesystems && [[ "$fstype" != overlayfs && "$fstype" != tmpfs && "$fstype" != unknown ]]; then
	args+=(--storage-driver overlay2)
else
	say "/var/lib/docker is on $fstype: using the vfs storage driver (slow, no sharing)"
	args+=(--storage-driver vfs)
fi

# Networking: bridge + iptables NAT when the kernel supports it.
net_ok=1
if ! ip link add berthprobe0 type bridge >/dev/null 2>&1; then
	net_ok=0
else
	ip link del berthprobe0 >/dev/null 2>&1 || true
fi
if ((net_ok)) && ! iptables -t nat -L -n >/dev/null 2>&1; then
	net_ok=0
fi
if ((!net_ok)); then
	say "no bridge/iptables nat support: starting dockerd with --iptables=false --bridge=none (containers get no network)"
	args+=(--iptables=false --bridge=none)
fi

# A stale pid file from a crashed daemon stops dockerd from starting.
for pidf in /var/run/docker.pid /run/docker/containerd/containerd.pid; do
	if [[ -f $pidf ]] && ! kill -0 "$(cat "$pidf" 2>/dev/null)" 2>/dev/null; then
		rm -f "$pidf"
	fi
done

say "starting dockerd ${args[*]} (log: $LOG)"
mkdir -p "$(dirname "$LOG")"
# 9>&-: the daemon must not inherit (and hold forever) the lock.
nohup setsid dockerd "${args[@]}" >>"$LOG" 2>&1 </dev/null 9>&- &
dpid=$!

for ((i = 0; i < WAIT * 4; i++)); do
	if answers; then
		say "dockerd (pid $dpid) answers on $SOCK"
		exit 0
	fi
	if ! kill -0 "$dpid" 2>/dev/null; then
		tail -n 40 "$LOG" >&2 || true
		die "dockerd exited during start-up (see $LOG)"
	fi
	sleep 0.25
done
tail -n 40 "$LOG" >&2 || true
die "dockerd did not answer on $SOCK within ${WAIT}s (see $LOG)"
