#!/usr/bin/env bash
# Makes sure `wrk` (a C HTTP load generator) is on PATH, for the passthrough benchmark's load,
# and prints its path. On a machine without it, installs Debian's `wrk` package (needs root and
# apt). Without it the benchmark still runs, with its own Python load generator instead.
set -euo pipefail
exec bash "$(dirname "$0")/debian-package.sh" wrk wrk
