#!/bin/sh
# ensure-node.sh makes sure node and npm are installed, for the check of the
# fake Daytona against Daytona's own TypeScript SDK
# (internal/testenv/daytonafake/sdkcheck), which installs the pinned SDK with
# npm into the user's cache at test time. It is idempotent.
set -eu

if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
	echo "ensure-node: node $(node --version) and npm $(npm --version) already installed"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-node: node or npm is missing and apt-get is not available; install Node.js (20 or later) and npm by hand" >&2
	exit 1
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
	SUDO="sudo"
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends nodejs npm
echo "ensure-node: node $(node --version) and npm $(npm --version) installed"
case "$(node --version)" in
v1[0-9].*|v[0-9].*) echo "ensure-node: Daytona's SDK needs Node.js 20 or later (Debian 13, or NodeSource's packages); the SDK check will say so" >&2 ;;
esac
