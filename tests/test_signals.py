"""What each signal means at each moment of the gateway's life (`http.signals.Signals`): SIGHUP
reloads only while the gateway serves, waits while it starts and is only logged while it
stops. The stop's signals are tested in test_drain.py and test_shutdown.py."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from gateway.http.signals import Signals, hold_hangups

from .conftest import ROOT, free_port
from .helpers import INIT, headers, write_config


async def _until(check: Callable[[], bool], seconds: float = 30) -> None:
    async with asyncio.timeout(seconds):
        while not check():  # noqa: ASYNC110 - a log file or a signal has no event to await
            await asyncio.sleep(0.005)


async def test_sighups_while_it_starts_are_one_reload_once_it_serves_and_none_in_the_cleanup(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reloads: list[int] = []
    loop = asyncio.get_running_loop()
    signals = Signals(loop, hangup=lambda: reloads.append(1))
    caplog.set_level(logging.INFO, logger="gateway.http.listen")
    try:
        for _ in range(3):
            os.kill(os.getpid(), signal.SIGHUP)
        await _until(lambda: "SIGHUP while the gateway starts" in caplog.text)
        await asyncio.sleep(0.05)  # the later two, handled meanwhile
        assert reloads == []
        signals.serving()
        assert reloads == [1]  # each reload re-reads the whole file: one is enough
        os.kill(os.getpid(), signal.SIGHUP)
        await _until(lambda: len(reloads) == 2)
        os.kill(os.getpid(), signal.SIGTERM)
        await _until(signals.stop.is_set)
        os.kill(os.getpid(), signal.SIGHUP)
        await _until(lambda: len(reloads) == 3)  # the drain serves, with a key rotated say
        signals.stopping()
        os.kill(os.getpid(), signal.SIGHUP)
        await _until(lambda: "the configuration is not reloaded" in caplog.text)
        assert len(reloads) == 3
    finally:
        signals.remove()
    said = [r.getMessage() for r in caplog.records if r.name == "gateway.http.listen"]
    assert said == [
        "SIGHUP while the gateway starts: applied once it serves",
        "SIGTERM received",
        "SIGHUP: the gateway is stopping; the configuration is not reloaded",
    ]


async def test_a_sighup_the_moment_the_port_answers_is_applied_once_the_gateway_serves(
    tmp_path: Path,
) -> None:
    """The port listens before the app has started (the store opens, the routes start), and
    the kernel completes connections meanwhile: a SIGHUP sent at the first one (a config
    manager that rewrote the file as the gateway restarted, say) once killed the process,
    SIGHUP's default action, every time. Now it is held, then applied."""
    port, log = free_port(), tmp_path / "gateway.log"
    proc = _start(write_config(tmp_path, port), log)
    try:
        # Logged once the file is read, before the port is bound: the change is the reload's.
        await _until(lambda: "configuration:" in log.read_text() or proc.poll() is not None)
        write_config(
            tmp_path,
            port,
            routes=f"routes: [{{name: demo, upstream: {_DEMO}}}, "
            f"{{name: again, upstream: {_DEMO}}}]",
        )
        await _until(lambda: _answers(port) or proc.poll() is not None)
        proc.send_signal(signal.SIGHUP)
        await _until(lambda: "routes added: again" in log.read_text() or proc.poll() is not None)
        assert proc.poll() is None, log.read_text()[-2000:]
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/again/mcp"
            async with http.post(url, json=INIT, headers=headers()) as resp:
                assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(15)
    assert "Traceback" not in log.read_text()


async def test_a_sighup_during_the_commands_imports_is_a_reload_once_it_serves(
    tmp_path: Path,
) -> None:
    """`systemctl reload` just after `start`, or `docker kill -s HUP` as the container
    starts: the imports alone take a second, and SIGHUP's default action would kill."""
    port, log = free_port(), tmp_path / "gateway.log"
    proc = _start(write_config(tmp_path, port), log)
    try:
        # The command's first step catches SIGHUP: the kernel shows it (not a guess at time).
        await _until(lambda: _catches_sighup(proc.pid) or proc.poll() is not None)
        assert "configuration:" not in log.read_text()  # the settings are not even read yet
        proc.send_signal(signal.SIGHUP)
        await _until(lambda: "configuration reloaded" in log.read_text() or proc.poll() is not None)
        assert proc.poll() is None, log.read_text()[-2000:]
    finally:
        proc.terminate()
        proc.wait(15)
    text = log.read_text()
    assert "SIGHUP while the gateway starts: applied once it serves" in text
    assert "Traceback" not in text


async def test_a_sighup_before_the_event_loop_is_held_for_its_signals() -> None:
    reloads: list[int] = []
    hold_hangups()
    try:
        os.kill(os.getpid(), signal.SIGHUP)  # before any loop handles it, as the command runs
        signals = Signals(asyncio.get_running_loop(), hangup=lambda: reloads.append(1))
        try:
            assert reloads == []
            signals.serving()
            assert reloads == [1]
        finally:
            signals.remove()
    finally:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    """The command, not waited for: the test watches its port itself."""
    with log.open("ab") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", "--config", str(config)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


_DEMO = "{transport: stdio, command: [python, -m, gateway.demo]}"


def _catches_sighup(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGHUP (its SigCgt mask, from /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGHUP - 1) & 1)


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return False
    return True
