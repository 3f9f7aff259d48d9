#!/usr/bin/env bash
# Short smoke runs of the benchmarks: each one starts, measures for a second or so and checks
# its answers; the numbers are not judged here (docs/benchmarks.md has the long runs). Run from
# .ci/run inside the project's venv, after .ci/ts-tasks.sh has installed the second reference.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/wrk.sh
python -m tests.bench.passthrough --seconds 1 --warmup 0.5 --rounds 1
# Against both in-memory references (Python and TypeScript SDKs): their answers are checked too.
python -m tests.bench.tasks --seconds 1 --warmup 0.5 --rounds 1 --tasks-in-flight 1000 --reference both
bash .ci/valgrind.sh
python -m tests.bench.instructions --calls 160
# Two versions in one run (here the same one twice: the smoke form of the method).
python -m tests.bench.ab --base HEAD --rounds 1 --seconds 1 --warmup 0.5
