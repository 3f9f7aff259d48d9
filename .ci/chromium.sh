#!/usr/bin/env bash
# Makes sure Debian's chromium is installed, for tests/test_browser.py (a real browser page
# calling the gateway across origins), and prints its path. Installs the `chromium` package if
# missing (needs root and apt).
set -euo pipefail
exec bash "$(dirname "$0")/debian-package.sh" chromium chromium
