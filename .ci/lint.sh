#!/usr/bin/env bash
# Lint, formatting, types and the import rules: the checks that read the code without running
# it. Run from .ci/run inside the project's venv (ruff, mypy and import-linter are test extras).
set -euo pipefail
cd "$(dirname "$0")/.."

ruff check gateway tests clients
ruff format --check gateway tests clients
mypy
lint-imports --no-cache
