#!/usr/bin/env bash
# Makes sure `wrk` (a C HTTP load generator) is on PATH, for the passthrough benchmark's load,
# and prints its path. On a machine without it, installs Debian's `wrk` package (needs root and
# apt). Without it the benchmark still runs, with its own Python load generator instead.
set -euo pipefail

if ! command -v wrk >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "wrk is not on PATH and installing it needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends wrk >/dev/null
fi
command -v wrk
