#!/usr/bin/env bash
# Makes sure Debian's chromium is installed, for tests/test_browser.py (a real browser page
# calling the gateway across origins), and prints its path. Installs the `chromium` package if
# missing (needs root and apt).
set -euo pipefail

if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "chromium is not installed and installing it needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi
command -v chromium
