#!/usr/bin/env bash
# The container image, built from the unmodified Dockerfile and run: what a user's first
# `docker build` / `docker run` meets. Uses podman (no Docker daemon is needed) and installs it
# from Debian when missing (root and apt). SKIP_IMAGE=1 skips it with one line.
#
# No image registry is reachable here, so the official base image cannot be pulled: the build
# runs FROM a stand-in made with mmdebstrap from Debian bookworm packages (Python 3.11.2, pip,
# venv), passed as the Dockerfile's PYTHON_IMAGE build argument. What this proves and what it
# cannot is in docs/docker.md.
#
# Every step prints its time; a failure prints `FAILED image step: NAME` and exits non-zero.
# Reruns reuse the stand-in (rebuilt only when its recipe changes), podman's layer cache and
# the podman-compose venv under .cache/image/.
set -Eeuo pipefail
shopt -s inherit_errexit # a failure inside $(...) fails the step too
cd "$(dirname "$0")/.."

if [ "${SKIP_IMAGE:-}" = 1 ]; then
  echo "== container image test skipped (SKIP_IMAGE=1)"
  exit 0
fi

CACHE=.cache/image
RUN_ID="mtg-ci-$$"
IMAGE=localhost/mcp-task-gateway:ci
STANDIN=localhost/mcp-task-gateway-ci/python-standin:3.11-bookworm
COMPOSE_VERSION=1.6.0
RUNTIME=${PODMAN_RUNTIME:-runc} # Debian's default, crun 1.8, fails on cgroup v1 hosts
mkdir -p "$CACHE"
WORK=$(mktemp -d)

pm() { podman --runtime "$RUNTIME" "$@"; }

# --- steps, timings, failure -------------------------------------------------------------------
STEP=setup
STEP_STARTED=$EPOCHREALTIME
SUITE_STARTED=$EPOCHREALTIME
TIMINGS=()
seconds_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
step() {
  STEP=$1
  STEP_STARTED=$EPOCHREALTIME
  echo "-- $STEP"
}
done_step() {
  local took
  took=$(seconds_since "$STEP_STARTED")
  TIMINGS+=("$(printf '%6s s  %s' "$took" "$STEP")")
}
failed() {
  [ "$BASH_SUBSHELL" = 0 ] || exit 1 # reported once, by the step's own line
  trap - ERR
  echo "FAILED image step: $STEP (line $1: $2)" >&2
  exit 1
}
trap 'failed "$LINENO" "$BASH_COMMAND"' ERR
fail() {
  echo "   $*" >&2
  return 1
}
cleanup() {
  local ctr
  for ctr in $(pm ps -a --filter "name=^$RUN_ID-" --format '{{.Names}}' 2>/dev/null); do
    pm rm -f -t 0 "$ctr" >/dev/null 2>&1 || true
  done
  pm volume rm -f "$RUN_ID-data" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- MCP over curl, as docs/tasks.md "With curl" does it -----------------------------------------
JSON_ACCEPT=(-H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
# The JSON-RPC response in a reply that is either JSON or an SSE stream (the last data: line
# that answers a request).
READ_REPLY='import json, sys
text = sys.stdin.read()
if text.lstrip().startswith("{"):
    print(text.strip())
else:
    found = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    found = [d for d in found if d.startswith("{") and "id" in json.loads(d)]
    print(found[-1] if found else "{}")'
# One value of a JSON document on stdin, by a dotted path (list indices as numbers).
READ_FIELD='import json, sys
value = json.load(sys.stdin)
for key in sys.argv[1].split("."):
    value = value[int(key)] if key.isdigit() else value[key]
print(value if isinstance(value, str) else json.dumps(value))'
field() { python3 -c "$READ_FIELD" "$1"; }

# rpc PORT PATH SID BODY [curl options...]: the JSON-RPC response to one request.
rpc() {
  local port=$1 path=$2 sid=$3 body=$4
  shift 4
  curl -sS -m 30 "${JSON_ACCEPT[@]}" -H "Mcp-Session-Id: $sid" "$@" \
    "http://127.0.0.1:$port$path" -d "$body" | python3 -c "$READ_REPLY"
}
# open_session PORT PATH [curl options...]: initialize + notifications/initialized; prints the
# session id.
open_session() {
  local port=$1 path=$2 headers reply sid
  shift 2
  headers="$WORK/headers"
  reply=$(curl -sS -m 30 -D "$headers" "${JSON_ACCEPT[@]}" "$@" "http://127.0.0.1:$port$path" \
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"image-test","version":"1"}}}')
  [ "$(python3 -c "$READ_REPLY" <<<"$reply" | field result.protocolVersion)" = 2025-11-25 ] ||
    fail "initialize on $path $* answered: $reply"
  sid=$(awk -F': ' 'tolower($1)=="mcp-session-id" {print $2}' "$headers" | tr -d '\r')
  [ -n "$sid" ] || fail "initialize on $path gave no Mcp-Session-Id"
  curl -sS -m 10 -o /dev/null "${JSON_ACCEPT[@]}" -H "Mcp-Session-Id: $sid" "$@" \
    "http://127.0.0.1:$port$path" -d '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  echo "$sid"
}
call_task() { # PORT PATH SID SECONDS [curl options...]: a task-augmented tools/call of `slow`
  local port=$1 path=$2 sid=$3 secs=$4
  shift 4
  rpc "$port" "$path" "$sid" \
    '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"seconds":'"$secs"',"steps":1},"task":{"ttl":600000}}}' \
    "$@" | field result.task.taskId
}
task_get() { # PORT PATH SID TASK: the task's status object
  rpc "$1" "$2" "$3" '{"jsonrpc":"2.0","id":4,"method":"tasks/get","params":{"taskId":"'"$4"'"}}' |
    field result
}
status_of() { field status; }

# --- containers ----------------------------------------------------------------------------------
NOFILE=$(ulimit -Hn)
if [ "$NOFILE" = unlimited ] || [ "$NOFILE" -gt 65536 ]; then NOFILE=65536; fi
NPROC=$(ulimit -Hu)
if [ "$NPROC" = unlimited ] || [ "$NPROC" -gt 4096 ]; then NPROC=4096; fi
# Explicit limits: without CAP_SYS_RESOURCE podman cannot raise them to its defaults.
LIMITS=(--ulimit "nofile=$NOFILE:$NOFILE" --ulimit "nproc=$NPROC:$NPROC")

# start NAME [podman run options...]: runs the image detached, waits for /healthz, prints the
# published host port.
start() {
  local name=$1 port
  shift
  pm run -d --name "$name" -p 127.0.0.1::8080 "${LIMITS[@]}" "$@" "$IMAGE" >"$WORK/run.out" 2>"$WORK/run.err" ||
    fail "podman run $name: $(tail -n 5 "$WORK/run.err")"
  port=$(pm port "$name" 8080 | awk -F: '{print $NF}')
  for _ in $(seq 100); do
    if curl -sf -m 2 "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then
      echo "$port"
      return 0
    fi
    if [ "$(pm inspect --format '{{.State.Running}}' "$name")" != true ]; then
      break
    fi
    sleep 0.2
  done
  pm logs "$name" 2>&1 | tail -n 20 >&2
  fail "$name did not answer /healthz"
}
# processes NAME: "pid ppid state uid command" for every process in the container but this probe.
PROCESSES='import os
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        stat = open(f"/proc/{pid}/stat").read()
        uid = next(l.split()[1] for l in open(f"/proc/{pid}/status") if l.startswith("Uid:"))
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
    except (OSError, StopIteration):
        continue
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
    print(pid, ppid, state, uid, cmd or f"[{name}]")'
processes() { pm exec "$1" python -c "$PROCESSES"; }
# stop NAME TIMEOUT: podman stop; fails on a non-zero exit code or a SIGKILL; prints seconds.
stop() {
  local name=$1 timeout=$2 began code
  began=$EPOCHREALTIME
  pm stop -t "$timeout" "$name" >/dev/null 2>"$WORK/stop.err"
  code=$(pm inspect --format '{{.State.ExitCode}}' "$name")
  if grep -qi sigkill "$WORK/stop.err" || [ "$code" != 0 ]; then
    pm logs "$name" 2>&1 | tail -n 10 >&2
    fail "podman stop $name: exit code $code; $(cat "$WORK/stop.err")"
  fi
  seconds_since "$began"
}

# --- the steps -----------------------------------------------------------------------------------
step "tools (podman, runc, mmdebstrap; podman-compose $COMPOSE_VERSION in $CACHE)"
missing=()
for tool in podman runc mmdebstrap curl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || fail "missing ${missing[*]}; installing them needs root (or SKIP_IMAGE=1)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends podman runc mmdebstrap curl >"$WORK/apt.log" 2>&1 ||
    fail "apt-get install podman runc mmdebstrap curl: $(tail -n 5 "$WORK/apt.log")"
fi
if [ ! -x "$CACHE/compose/bin/podman-compose" ]; then
  python3 -m venv "$CACHE/compose"
  "$CACHE/compose/bin/pip" install -q "podman-compose==$COMPOSE_VERSION" >"$WORK/pip.log" 2>&1 ||
    fail "pip install podman-compose: $(tail -n 5 "$WORK/pip.log")"
fi
podman --version
done_step

step "docker-compose.yml validated by podman-compose config"
"$CACHE/compose/bin/podman-compose" -f docker-compose.yml config >"$WORK/compose.out" 2>&1 ||
  fail "$(tail -n 5 "$WORK/compose.out")"
done_step

step "stand-in base image (Debian bookworm, Python 3.11.2)"
# Like the official image: python, pip and venv; no PEP 668 marker; Debian's slim exclusions.
# This host's extra CA certificates (a proxy's) go in so that pip and apt inside work here.
# shellcheck disable=SC2016,SC2054 # hooks run later with $1 = the rootfs; --include takes commas
STANDIN_RECIPE=(
  --variant=minbase
  --include=python3,python3-pip,python3-venv,python-is-python3,ca-certificates,netbase,tzdata
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias'
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED'
  --customize-hook='for c in /usr/local/share/ca-certificates/*.crt; do [ -e "$c" ] && cp "$c" "$1/usr/local/share/ca-certificates/"; done; chroot "$1" update-ca-certificates >/dev/null'
)
sources=()
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
  if [ -s "$file" ]; then sources+=("$file"); fi
done
inputs=("${sources[@]}")
for file in /usr/local/share/ca-certificates/*.crt; do
  if [ -s "$file" ]; then inputs+=("$file"); fi
done
recipe=$( (printf '%s\n' "${STANDIN_RECIPE[@]}" && cat "${inputs[@]}") | sha256sum | cut -c1-16)
have=$(pm image inspect --format '{{index .Labels "mcp-task-gateway-ci.recipe"}}' "$STANDIN" 2>/dev/null || true)
if [ "$have" != "$recipe" ]; then
  mmdebstrap -q "${STANDIN_RECIPE[@]}" bookworm "$WORK/rootfs.tar" "${sources[@]}" >"$WORK/mmdebstrap.log" 2>&1 ||
    fail "mmdebstrap: $(tail -n 5 "$WORK/mmdebstrap.log")"
  pm import -q \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    --change "LABEL mcp-task-gateway-ci.recipe=$recipe" \
    "$WORK/rootfs.tar" "$STANDIN" >/dev/null
  rm -f "$WORK/rootfs.tar"
  echo "   made $STANDIN"
else
  echo "   reused $STANDIN"
fi
done_step

step "podman build of the Dockerfile"
previous=$(pm image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)
# --format docker keeps HEALTHCHECK (the OCI format has none).
if ! pm build --pull=never --format docker --build-arg "PYTHON_IMAGE=$STANDIN" \
  --iidfile "$WORK/iid" -t "$IMAGE" . >"$CACHE/build.log" 2>&1; then
  tail -n 15 "$CACHE/build.log" | sed 's/^/   /' >&2
  fail "the build failed (whole log: $CACHE/build.log)"
fi
built=$(cat "$WORK/iid")
if [ -n "$previous" ] && [ "${built#sha256:}" != "$previous" ]; then
  pm rmi "$previous" >/dev/null 2>&1 || true # keeps the layer cache, drops the old tag's image
fi
IMAGE=$built # this run's image, whatever another run tags meanwhile
done_step

step "image contents: an init, a non-root user, the project's Python, no build tools or caches"
size=$(pm image inspect --format '{{.Size}}' "$IMAGE")
echo "   image size: $((size / 1000000)) MB ($size bytes; the stand-in base alone: $(($(pm image inspect --format '{{.Size}}' "$STANDIN") / 1000000)) MB)"
[ "$(pm image inspect --format '{{.Config.User}}' "$IMAGE")" = gateway ] || fail "USER is not gateway"
healthcheck=$(pm image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")
grep -q healthz <<<"$healthcheck" || fail "the image has no HEALTHCHECK asking /healthz: $healthcheck"
wanted=$(python3 -c 'import re, tomllib; print(re.search(r"\d+\.\d+", tomllib.load(open("pyproject.toml", "rb"))["project"]["requires-python"])[0])')
# shellcheck disable=SC2016 # expanded by the container's shell
pm run --rm --user root --entrypoint sh --no-healthcheck "${LIMITS[@]}" -e "WANTED=$wanted" "$IMAGE" -c '
  set -e
  command -v tini >/dev/null || { echo "no tini"; exit 1; }
  for tool in gcc cc make; do ! command -v $tool >/dev/null || { echo "build tool: $tool"; exit 1; }; done
  for path in /wheels /src /root/.cache/pip; do [ ! -e $path ] || { echo "left behind: $path"; exit 1; }; done
  [ -z "$(find /var/lib/apt/lists /var/cache/apt -type f ! -name lock 2>/dev/null)" ] || { echo "apt caches left"; exit 1; }
  python -c "import importlib.util as u, sys; assert u.find_spec(\"tests\") is None, \"tests installed\"
v = \"%d.%d\" % sys.version_info[:2]
assert tuple(map(int, v.split(\".\"))) >= tuple(map(int, \"$WANTED\".split(\".\"))), v
import gateway.demo"
  python --version
' || fail "the image's contents"
done_step

VOLUME="$RUN_ID-data"
pm volume create "$VOLUME" >/dev/null

step "run as built, read-only root, no --init: /healthz, /livez, /readyz and the HEALTHCHECK"
# Docker's --read-only has no tmpfs on /tmp; podman's adds one unless told not to.
A="$RUN_ID-a"
PORT=$(start "$A" --read-only --read-only-tmpfs=false -v "$VOLUME:/app/data")
for probe in healthz livez readyz; do
  [ "$(curl -sS -m 5 "http://127.0.0.1:$PORT/$probe")" = '{"status": "ok"}' ] || fail "/$probe"
done
pm healthcheck run "$A" >/dev/null 2>"$WORK/hc.err" || fail "podman healthcheck run: $(cat "$WORK/hc.err")"
[ "$(pm inspect --format '{{.State.Health.Status}}' "$A")" = healthy ] || fail "not healthy"
done_step

step "MCP on the demo route: initialize, tools/list, a task-augmented call to its result"
DEMO=/demo/mcp
SID=$(open_session "$PORT" "$DEMO")
tools=$(rpc "$PORT" "$DEMO" "$SID" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' | field result.tools)
grep -q '"name": "slow"' <<<"$tools" || fail "tools/list has no slow: $tools"
DONE_TASK=$(call_task "$PORT" "$DEMO" "$SID" 0.2)
for _ in $(seq 50); do
  [ "$(task_get "$PORT" "$DEMO" "$SID" "$DONE_TASK" | status_of)" = completed ] && break
  sleep 0.1
done
[ "$(task_get "$PORT" "$DEMO" "$SID" "$DONE_TASK" | status_of)" = completed ] || fail "task not completed"
RESULT=$(rpc "$PORT" "$DEMO" "$SID" '{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"'"$DONE_TASK"'"}}' | field result.content)
if [ -z "$RESULT" ] || [ "$RESULT" = "[]" ]; then fail "tasks/result: no content"; fi
done_step

step "MCP with a non-loopback Host (another container, a Prometheus scrape)"
OTHER=(-H 'Host: gateway:8080')
OTHER_SID=$(open_session "$PORT" "$DEMO" "${OTHER[@]}")
tools=$(rpc "$PORT" "$DEMO" "$OTHER_SID" '{"jsonrpc":"2.0","id":2,"method":"tools/list"}' "${OTHER[@]}" | field result.tools)
grep -q '"name": "echo"' <<<"$tools" || fail "tools/list with Host gateway:8080: $tools"
task=$(call_task "$PORT" "$DEMO" "$OTHER_SID" 0 "${OTHER[@]}")
[ -n "$task" ] || fail "no task with Host gateway:8080"
metrics=$(curl -sSf -m 5 "${OTHER[@]}" "http://127.0.0.1:$PORT/metrics")
grep -q '^mcp_gateway_' <<<"$metrics" || fail "/metrics with Host gateway:8080 has no mcp_gateway_ series"
done_step

step "every process runs as a non-root user"
processes "$A" >"$WORK/ps"
sed 's/^/   /' "$WORK/ps"
awk '$4 == 0 { bad = 1 } END { exit bad }' "$WORK/ps" || fail "a process runs as root"
[ "$(awk '$1 == 1 { print $5 }' "$WORK/ps")" = tini ] || fail "PID 1 is not the image's init"
done_step

step "podman stop while a task runs: the drain lets it finish, exit code 0, no SIGKILL"
RUNNING_TASK=$(call_task "$PORT" "$DEMO" "$SID" 3)
[ "$(task_get "$PORT" "$DEMO" "$SID" "$RUNNING_TASK" | status_of)" = working ] || fail "not working"
# The stop timeout (60 s) is longer than the shipped drain (30 s) and shutdown grace (10 s)
# together, as in compose; the gateway exits when its last task ends.
took=$(stop "$A" 60)
echo "   stopped in $took s"
awk -v t="$took" 'BEGIN { exit !(t < 20) }' ||
  fail "the stop took $took s: it waited for more than the running task"
done_step

step "a config mounted read-only at /app/config/gateway.yaml is the one used"
cat >"$WORK/gateway.yaml" <<'YAML'
# The image test's own configuration: the demo route, and one whose stdio command leaves an
# orphan (a background sleep) behind when its session ends, for the init to reap.
http:
  shutdown_grace_seconds: 3
shutdown:
  drain_seconds: 2
routes:
  - name: demo
    upstream: {transport: stdio, command: [python, -m, gateway.demo]}
  - name: orphans
    upstream: {transport: stdio, command: [sh, -c, "sleep 1 & exec python -m gateway.demo"]}
YAML
chmod 644 "$WORK/gateway.yaml"
B="$RUN_ID-b"
PORT=$(start "$B" -v "$VOLUME:/app/data" -v "$WORK/gateway.yaml:/app/config/gateway.yaml:ro")
sid=$(open_session "$PORT" /orphans/mcp) # only this config has the route
curl -sS -m 10 -o /dev/null -X DELETE -H "Mcp-Session-Id: $sid" "http://127.0.0.1:$PORT/orphans/mcp"
logs=$(pm logs "$B" 2>&1)
grep -q 'route orphans: http://[^ ]*/orphans/mcp -> stdio sh' <<<"$logs" || fail "no orphans route in the log"
done_step

step "a new container on the same volume reads back the session, the finished task, the drained one"
done_status=$(task_get "$PORT" "$DEMO" "$SID" "$DONE_TASK")
[ "$(status_of <<<"$done_status")" = completed ] || fail "finished task after the restart: $done_status"
again=$(rpc "$PORT" "$DEMO" "$SID" '{"jsonrpc":"2.0","id":5,"method":"tasks/result","params":{"taskId":"'"$DONE_TASK"'"}}' | field result.content)
[ "$again" = "$RESULT" ] || fail "tasks/result after the restart: $again, before: $RESULT"
drained=$(task_get "$PORT" "$DEMO" "$SID" "$RUNNING_TASK")
[ "$(status_of <<<"$drained")" = completed ] || fail "the task running at the stop: $drained"
done_step

step "no zombies after stdio sessions end (the image's init reaps orphans)"
for _ in 1 2 3; do
  sid=$(open_session "$PORT" /orphans/mcp)
  echoed=$(rpc "$PORT" /orphans/mcp "$sid" '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}')
  grep -q '"hi"' <<<"$echoed" || fail "echo on /orphans/mcp: $echoed"
  curl -sS -m 10 -o /dev/null -X DELETE -H "Mcp-Session-Id: $sid" "http://127.0.0.1:$PORT/orphans/mcp"
done
# The route's children are "python -m gateway.demo" (sh found python on PATH) and "sleep 1";
# the demo route's run the gateway's own interpreter by its full path.
left() { awk '$3 == "Z" || ($5 == "python" && $7 == "gateway.demo") || $5 == "sleep"' "$WORK/ps"; }
for _ in $(seq 50); do
  processes "$B" >"$WORK/ps"
  [ -n "$(left)" ] || break
  sleep 0.2
done
sed 's/^/   /' "$WORK/ps"
[ -z "$(awk '$3 == "Z"' "$WORK/ps")" ] || fail "zombie processes are left"
[ -z "$(left)" ] || fail "the orphans route's children outlive their sessions"
done_step

step "podman stop with podman's default timeout (10 s), a 2 s drain and a 3 s shutdown grace"
LONG_TASK=$(call_task "$PORT" "$DEMO" "$SID" 60)
[ "$(task_get "$PORT" "$DEMO" "$SID" "$LONG_TASK" | status_of)" = working ] || fail "not working"
took=$(stop "$B" 10)
echo "   stopped in $took s (the task running then fails as interrupted: gateway shut down)"
done_step

echo "== container image: every step passed in $(seconds_since "$SUITE_STARTED") s"
printf '%s\n' "${TIMINGS[@]}"
