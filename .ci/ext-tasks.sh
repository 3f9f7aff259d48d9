#!/usr/bin/env bash
# The tasks-extension (SEP-2663) client that tests/test_ext_tasks_client.py drives:
# @modelcontextprotocol/ext-tasks and @modelcontextprotocol/client, pinned by
# tests/modern/ext-tasks/package-lock.json and installed with `npm ci` into
# $REPO/.cache/ext-tasks (env EXT_TASKS_DIR) by .ci/npm-pinned.sh.
#
# Usage: bash .ci/ext-tasks.sh
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$REPO/.ci/npm-pinned.sh" ext-tasks tests/modern/ext-tasks \
  "${EXT_TASKS_DIR:-$REPO/.cache/ext-tasks}" \
  @modelcontextprotocol/ext-tasks:0.2.2 @modelcontextprotocol/client:2.4.0
