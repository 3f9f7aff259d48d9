#!/usr/bin/env bash
# Makes sure a `prometheus` binary is on PATH, for tests/test_dashboards.py, and prints its path.
# On a machine without one it installs Debian's `prometheus` package (needs root and apt).
# Idempotent: with prometheus already installed it only prints the path. The package may try
# to start its own system service; the tests do not use it, they run their own process.
set -euo pipefail

if ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "prometheus is not on PATH and installing it needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Recommends (node exporter and friends) are not needed to run the server binary.
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
command -v prometheus
