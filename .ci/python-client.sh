#!/usr/bin/env bash
# The Python requester for the tasks extension (clients/python, distribution mcp-tasks-client):
# installed as a user would (`pip install ./clients/python[test]`, mcp 2.x) into a venv of its
# own, type-checked (mypy --strict), then its tests run against the real gateway, which they
# start from the gateway's own interpreter (mcp 1.30 there; the two cannot share a venv).
#
# Usage: bash .ci/python-client.sh [pytest args]
# Env: PYTHON_CLIENT_VENV   the client's venv (default $REPO/.cache/python-client/venv)
#      PYTHON               builds that venv (python3; >= 3.11)
#      GATEWAY_PYTHON       runs `-m gateway` in the tests (default $REPO/.venv/bin/python)
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PYTHON_CLIENT_VENV:-$REPO/.cache/python-client/venv}"
GATEWAY_PYTHON="${GATEWAY_PYTHON:-$REPO/.venv/bin/python}"

if [ ! -x "$GATEWAY_PYTHON" ]; then
  echo "python-client.sh: no gateway interpreter at $GATEWAY_PYTHON (set GATEWAY_PYTHON)" >&2
  exit 2
fi
if [ ! -x "$VENV/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
"$VENV/bin/python" -m pip install -q "$REPO/clients/python[test]"

cd "$REPO/clients/python"
"$VENV/bin/python" -m mypy --strict
MCP_TASKS_GATEWAY_PYTHON="$GATEWAY_PYTHON" "$VENV/bin/python" -m pytest -q "$@"
