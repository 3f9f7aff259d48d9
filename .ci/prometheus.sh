#!/usr/bin/env bash
# Makes sure a `prometheus` binary is on PATH, for tests/test_dashboards.py, and prints its path.
# On a machine without one it installs Debian's `prometheus` package (needs root and apt).
# Idempotent: with prometheus already installed it only prints the path. The package may try
# to start its own system service; the tests do not use it, they run their own process.
set -euo pipefail
exec bash "$(dirname "$0")/debian-package.sh" prometheus prometheus
