#!/bin/sh
# ensure-sshd.sh makes sure OpenSSH's sshd and ssh client binaries are installed
# so the ssh backend tests (internal/testenv/sshenv) can start a private sshd on
# 127.0.0.1. It is idempotent and never starts or enables the system sshd service:
# the tests start their own sshd with a throwaway configuration.
set -eu

if [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null 2>&1 && command -v ssh-keygen >/dev/null 2>&1; then
	echo "ensure-sshd: $(/usr/sbin/sshd -V 2>&1 | head -n1 || true) already installed"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-sshd: /usr/sbin/sshd is missing and apt-get is not available; install OpenSSH server by hand" >&2
	exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# policy-rc.d keeps the package's postinst from starting the system sshd.
POLICY=/usr/sbin/policy-rc.d
CREATED_POLICY=""
if [ ! -e "$POLICY" ]; then
	printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
	$SUDO chmod 755 "$POLICY"
	CREATED_POLICY=1
fi
status=0
$SUDO apt-get install -y -q --no-install-recommends openssh-server openssh-client || status=$?
if [ -n "$CREATED_POLICY" ]; then
	$SUDO rm -f "$POLICY"
fi
if [ "$status" -ne 0 ]; then
	echo "ensure-sshd: apt-get install openssh-server openssh-client failed ($status)" >&2
	exit "$status"
fi
# sshd refuses to start without its privilege separation directory.
$SUDO mkdir -p /run/sshd
echo "ensure-sshd: installed $(/usr/sbin/sshd -V 2>&1 | head -n1 || true)"
