#!/usr/bin/env bash
# Debian's packages the tests and the benchmarks run (installed when missing: root and apt),
# one after another since apt takes one install at a time, then the tests' own PostgreSQL
# cluster started. Prints each tool's path and the cluster's settings file.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/prometheus.sh  # the dashboard test's Prometheus
bash .ci/nginx.sh       # the reverse proxy the proxy tests put in front of the gateway
bash .ci/chromium.sh    # the browser the CORS and console tests drive
bash .ci/wrk.sh         # the passthrough benchmark's load
bash .ci/valgrind.sh    # the instruction counts
bash .ci/postgres.sh    # a cluster of the tests' own, for the shared store's tests
