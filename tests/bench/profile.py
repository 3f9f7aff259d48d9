"""Where a running gateway's CPU goes: py-spy samples of its process, summed by function.

Run it beside a benchmark that loads the gateway, with the gateway's pid::

    .venv/bin/python -m tests.bench.passthrough --targets gateway --seconds 25 --rounds 1 &
    sleep 8
    .venv/bin/python -m tests.bench.profile $(pgrep -f 'gateway --config .*bench-pass') 10

It prints the functions with the most samples on top of the stack (self) and anywhere in it
(inclusive, each function once per sample), as shares of all samples; idle samples (the event
loop waiting in `select`) are counted apart, so the shares are of the time the process was busy.
py-spy (`pip install py-spy`) must be able to read the process (same user, or root).
"""

from __future__ import annotations

import collections
import subprocess
import sys
import tempfile
from pathlib import Path

#: Frames of a loop waiting for work: not the gateway's cost.
_IDLE = ("select (selectors.py", "_run_once (asyncio/base_events.py", "epoll")


def summarise(collapsed: str, top: int = 25) -> str:
    selfs: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    busy = idle = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[-1].startswith(_IDLE[0]):
            idle += count
            continue
        busy += count
        selfs[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not busy:
        return "no busy samples"
    lines = [f"samples: {busy} busy, {idle} idle ({busy / (busy + idle):.0%} busy)", "", "self:"]
    lines += [f"  {n / busy:6.1%}  {frame}" for frame, n in selfs.most_common(top)]
    lines += ["", "self, by package:"]
    lines += [f"  {n / busy:6.1%}  {name}" for name, n in by_package(selfs).most_common()]
    lines += ["", "inclusive, the gateway's own functions:"]
    own = [(f, n) for f, n in inclusive.most_common() if "(gateway/" in f]
    lines += [f"  {n / busy:6.1%}  {frame}" for frame, n in own[:top]]
    return "\n".join(lines)


def by_package(selfs: collections.Counter[str]) -> collections.Counter[str]:
    """Self samples summed by where the code lives: the gateway, aiohttp, asyncio, ..."""
    out: collections.Counter[str] = collections.Counter()
    for frame, n in selfs.items():
        path = frame[frame.rfind("(") + 1 :]
        top = path.split("/", 1)[0].split(".py", 1)[0] if "/" in path else path.split(".py")[0]
        out[top] += n
    return out


def main() -> int:
    pid, seconds = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 10
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "profile.txt"
        # --gil: only the thread holding the GIL, so a thread blocked in a C call (aiosqlite's
        # worker waiting on its queue) is not counted as busy.
        argv = ["py-spy", "record", "-p", str(pid), "-d", str(seconds), "-r", "200", "--gil"]
        subprocess.run([*argv, "-f", "raw", "-o", str(out)], check=True, capture_output=True)
        print(summarise(out.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
