#!/usr/bin/env bash
# The tasks benchmark's TypeScript reference (tests/bench/ts-tasks/server.mjs): npm
# @modelcontextprotocol/sdk 1.32.2, pinned by tests/bench/ts-tasks/package-lock.json and
# installed with `npm ci` into $REPO/.cache/ts-tasks (env TS_TASKS_DIR) by .ci/npm-pinned.sh.
#
# Usage: bash .ci/ts-tasks.sh
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$REPO/.ci/npm-pinned.sh" ts-tasks tests/bench/ts-tasks \
  "${TS_TASKS_DIR:-$REPO/.cache/ts-tasks}" @modelcontextprotocol/sdk:1.32.2
