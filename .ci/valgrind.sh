#!/usr/bin/env bash
# Makes sure valgrind (callgrind and callgrind_control) is on PATH, for the instruction
# counts of tests/bench/instructions.py, and prints its path. On a machine without it,
# installs Debian's `valgrind` package (needs root and apt).
set -euo pipefail

if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "valgrind is not on PATH and installing it needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi
command -v callgrind_control
