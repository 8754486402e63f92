#!/usr/bin/env bash
# ensure-apptainer-deps.sh — install what the stand-in `apptainer` needs.
#
# The singularity backend is tested against a stand-in `apptainer` executable
# (internal/testenv/apptainerenv) because no Apptainer is packaged for Debian
# bookworm. The stand-in isolates with bubblewrap and writes real SIF files
# holding a squashfs made by mksquashfs, so it needs Debian's
#   bubblewrap      (bwrap)
#   squashfs-tools  (mksquashfs, unsquashfs)
#   util-linux      (nsenter; normally already installed)
#
# Idempotent: when every tool is on PATH it does nothing. Must run as root to
# install. Safe to run concurrently (flock).
set -euo pipefail

say() { echo "ensure-apptainer-deps: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

missing() {
	local pkgs=()
	command -v bwrap >/dev/null 2>&1 || pkgs+=(bubblewrap)
	{ command -v mksquashfs >/dev/null 2>&1 && command -v unsquashfs >/dev/null 2>&1; } || pkgs+=(squashfs-tools)
	command -v nsenter >/dev/null 2>&1 || pkgs+=(util-linux)
	echo "${pkgs[@]:-}"
}

need=$(missing)
if [[ -z "$need" ]]; then
	say "bwrap, mksquashfs, unsquashfs and nsenter are present"
	exit 0
fi

LOCK=/var/lock/berth-ensure-apptainer-deps.flock
exec 9>"$LOCK"
flock -w 300 9 || die "another ensure-apptainer-deps.sh still holds $LOCK after 300s"

need=$(missing)
if [[ -z "$need" ]]; then
	say "installed meanwhile by another run"
	exit 0
fi
[[ $(id -u) == 0 ]] || die "need root to install $need"
say "installing $need with apt-get"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || die "apt-get update failed"
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $need >/dev/null || die "apt-get install $need failed"

need=$(missing)
[[ -z "$need" ]] || die "still missing after install: $need"
say "installed"
