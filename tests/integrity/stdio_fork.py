"""The stdio child, started in milliseconds: the gateway's command for it is this launcher.

Each stdio child the gateway starts would import mcp 2.3 afresh (about 1.7 s of CPU), and the
routes py-stdio and members start one per session: on the two shared cores that queue ate the
run's own time. So a fork server (`upstream_py.py --fork-server SOCKET`, started with the
other upstreams) imports it once; this launcher, which imports nothing but the standard
library, hands it its own stdin and stdout (SCM_RIGHTS), and the server forks a child that
serves the mcp 2.3 stdio server on exactly those pipes, as `upstream_py.py --stdio` would.
The launcher stays the process the gateway sees: it exits when the child does, and passes on
a SIGTERM or SIGINT the gateway sends.

    python tests/integrity/stdio_fork.py SOCKET
"""

from __future__ import annotations

import os
import select
import signal
import socket
import sys
import time


def main(path: str) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(path)
        socket.send_fds(sock, [b"fds"], [0, 1])
        pid = int(sock.makefile().readline())
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the child's alone: the gateway reads EOF on stdout when it exits
        os.dup2(null, fd)

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    gone(pid)
    return 0


def gone(pid: int) -> None:
    """Returns once `pid` has exited (the fork server, its parent, reaps it at once)."""
    if hasattr(os, "pidfd_open"):  # Linux
        try:
            done = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        select.select([done], [], [])  # (retried after a signal's handler, PEP 475)
        return
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
