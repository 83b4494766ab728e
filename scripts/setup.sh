#!/usr/bin/env bash
# Install what glmops and its tests need on a fresh Debian machine (run as root).
set -euo pipefail
cd "$(dirname "$0")/.."

# The testbed's hosts, and binutils' strip for the Triton packed for GPU runs
# (tests/gpu/pack_triton.py).
packages="debootstrap systemd-container iproute2 iptables openssh-client rsync git procps binutils"
missing=""
for package in $packages; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=" $package"
done
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends $missing
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
