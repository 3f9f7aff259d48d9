#!/usr/bin/env bash
# A PostgreSQL server of the tests' own, for the shared store (`store.backend: postgres`):
# Debian's `postgresql` package, a cluster in .cache/postgres (never the system's), run by a
# non-root user, on 127.0.0.1 only, with password authentication (the gateway reads the
# password from PGPASSWORD, as an operator's would). Idempotent: a running server is left as it
# is. Prints the file of settings the tests read (MCPGW_PG_URL, PGPASSWORD).
#
#   bash .ci/postgres.sh          start it if it is not running
#   bash .ci/postgres.sh --stop   stop it
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=$(pwd)/.cache/postgres
DATA=$ROOT/data
PORT=${MCPGW_PG_PORT:-55432}
OWNER=${MCPGW_PG_OWNER:-mcpgw-pg}
ENV_FILE=$ROOT/env

bindir() {
  local initdb
  initdb=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -n 1)
  [ -n "$initdb" ] && dirname "$initdb"
}

as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$OWNER" -- "$@"
  else
    "$@"
  fi
}

BIN=$(bindir || true)
if [ "${1:-}" = "--stop" ]; then
  [ -n "$BIN" ] && [ -f "$DATA/postmaster.pid" ] && as_owner "$BIN/pg_ctl" -D "$DATA" -m fast stop
  exit 0
fi

if [ -z "$BIN" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "PostgreSQL is not installed and installing it needs root (apt-get)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # The package's own cluster and service are not used: the tests run their own.
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  BIN=$(bindir)
fi

# PostgreSQL refuses to run as root: the cluster belongs to a system user of its own.
if [ "$(id -u)" -eq 0 ] && ! id "$OWNER" >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin "$OWNER"
fi
mkdir -p "$ROOT"
[ "$(id -u)" -eq 0 ] && chown "$OWNER" "$ROOT"
# The test workers (pytest -n) each run this script as they start: one at a time, so that
# none reads the settings file while another writes it, nor starts the server twice.
exec 9>"$ROOT/.lock"
flock 9

if [ ! -f "$DATA/PG_VERSION" ]; then
  password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
  as_owner sh -c "umask 077 && printf '%s\n' '$password' > '$ROOT/pwfile'"
  as_owner "$BIN/initdb" -D "$DATA" -U gateway --pwfile="$ROOT/pwfile" \
    --auth-host=scram-sha-256 --auth-local=scram-sha-256 -E UTF8 >/dev/null
  rm -f "$ROOT/pwfile"
  {
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$DATA'"
    # Tests and replicas open many connections; fsync stays on, as in production.
    echo "max_connections = 300"
  } | as_owner tee -a "$DATA/postgresql.conf" >/dev/null
  (umask 077 && printf '%s\n' "$password" >"$ROOT/password")
fi
# Written on every start, so that MCPGW_PG_PORT can move an existing cluster.
(umask 077 && printf 'MCPGW_PG_URL=postgresql://gateway@127.0.0.1:%s/postgres\nPGPASSWORD=%s\n' \
  "$PORT" "$(cat "$ROOT/password")" >"$ENV_FILE.new" && mv "$ENV_FILE.new" "$ENV_FILE")

if ! as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
  # The server it leaves running must not hold the lock.
  if ! as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -o "-p $PORT" -w -t 60 \
    start >/dev/null 9>&-; then
    tail -n 5 "$DATA/server.log" >&2
    # Most often another checkout's cluster already holds the port.
    echo "PostgreSQL did not start on port $PORT: stop the other server there" \
      "(bash .ci/postgres.sh --stop in its checkout) or set MCPGW_PG_PORT" >&2
    exit 1
  fi
fi
echo "$ENV_FILE"
