#!/usr/bin/env bash
# Makes sure Debian's nginx is installed, for tests/test_behind_proxy.py (a real reverse proxy
# in front of the gateway), and prints its path. Installs the `nginx-light` package if missing
# (needs root and apt); the system service it may start is stopped: the test runs its own.
set -euo pipefail
export PATH="$PATH:/usr/sbin"

if ! command -v nginx >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "nginx is not installed and installing it needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends nginx-light >/dev/null
  service nginx stop >/dev/null 2>&1 || true
fi
command -v nginx
