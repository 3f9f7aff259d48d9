#!/usr/bin/env bash
# Usage: debian-package.sh PACKAGE COMMAND [COMMAND...]
# Makes sure every COMMAND is on PATH, installing Debian's PACKAGE (without its recommends)
# when one is not (needs root and apt), and prints the path of each. The one mechanism behind
# the tool scripts beside it (chromium.sh, prometheus.sh, valgrind.sh, wrk.sh).
set -euo pipefail

package=$1
shift
missing=0
for command in "$@"; do
  command -v "$command" >/dev/null 2>&1 || missing=1
done
if [ "$missing" -eq 1 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "$* not on PATH, and installing Debian's $package needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$package" >/dev/null
fi
for command in "$@"; do
  command -v "$command"
done
