#!/usr/bin/env bash
# Makes sure valgrind (callgrind and callgrind_control) is on PATH, for the instruction
# counts of tests/bench/instructions.py, and prints their paths. On a machine without them,
# installs Debian's `valgrind` package (needs root and apt).
set -euo pipefail
exec bash "$(dirname "$0")/debian-package.sh" valgrind valgrind callgrind_control
