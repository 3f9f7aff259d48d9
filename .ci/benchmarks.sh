#!/usr/bin/env bash
# Short smoke runs of the benchmarks: each one starts, measures for a second or so and checks
# its answers; the numbers are not judged here (docs/benchmarks.md has the long runs). Run from
# .ci/run inside the project's venv, after .ci/ts-tasks.sh has installed the second reference.
#
#   bash .ci/benchmarks.sh timed    the timed ones (wrk's load, the task patterns beside the
#                                   references, two versions in one run, replicas each under
#                                   the same load): CI runs them alone
#   bash .ci/benchmarks.sh counts   the instruction counts under valgrind, which no other load
#                                   moves: CI runs them beside other sections
#   bash .ci/benchmarks.sh          both
set -euo pipefail
cd "$(dirname "$0")/.."

part=${1:-all}
case "$part" in
  timed | counts | all) ;;
  *) echo "usage: bash .ci/benchmarks.sh [timed|counts]" >&2; exit 2 ;;
esac

if [ "$part" != counts ]; then
  bash .ci/wrk.sh
  python -m tests.bench.passthrough --seconds 1 --warmup 0.5 --rounds 1
  # In front of the SDK's FastMCP server, which answers on SSE streams.
  python -m tests.bench.passthrough --upstream sdk --concurrency 4 --seconds 1 --warmup 0.5 --rounds 1
  # Against both in-memory references (Python and TypeScript SDKs): their answers are checked too.
  python -m tests.bench.tasks --seconds 1 --warmup 0.5 --rounds 1 --tasks-in-flight 1000 --reference both
  # Two versions in one run (here the same one twice: the smoke form of the method).
  python -m tests.bench.ab --base HEAD --rounds 1 --seconds 1 --warmup 0.5
  python -m tests.bench.ab --base HEAD --store postgres --rounds 1 --seconds 1 --warmup 0.5
  python -m tests.bench.ab --base HEAD --kind modern --rounds 1 --seconds 1 --warmup 0.5
  # Each gateway process under the same paced load: SQLite, one replica, three replicas.
  python -m tests.bench.per_replica --rounds 1 --seconds 1 --warmup 0.5
fi
if [ "$part" != timed ]; then
  bash .ci/valgrind.sh
  # A server under callgrind is some fifty times slower than alone: its start may take a
  # minute beside other sections (tests.bench.instructions waits up to 300 s). Not niced: at
  # a low priority beside the conformance suite, the forwarder's loop starved past its
  # connect timeout.
  python -m tests.bench.instructions --calls 160 --warmup 80
fi
