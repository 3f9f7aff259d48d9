"""What the command says as it starts and stops, for a person reading the log: the
configuration file, every route's full URL and upstream, where health and metrics are, each
upstream that does not answer, and the beginning and end of the shutdown; never an upstream's
credentials. The audit lines are on a stream of their own."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from gateway.config import ListenConfig
from gateway.demo.tools import DEMO_TOOLS
from gateway.http import announce

from .conftest import ROOT, free_port
from .helpers import DEMO_ROUTE, open_session, start_process, write_config


def test_the_log_says_where_everything_is_and_when_the_stop_begins_and_ends(
    tmp_path: Path,
) -> None:
    port = free_port()
    secret_url = "http://user:s3cret@127.0.0.1:9/mcp?token=s3cret"
    upstream = f"{{transport: streamable_http, url: {json.dumps(secret_url)}}}"
    # The demo with a secret among its arguments, which it never sees (it would refuse
    # them, and its refusal, on its stderr, quotes them: the gateway logs a child's stderr).
    run_demo = "import sys; sys.argv[1:] = []; from gateway.demo.stdio import main; main()"
    command = json.dumps(["python", "-c", run_demo, "--key", "s3cret"])
    routes = (
        "routes:\n"
        f"  - {{name: demo, upstream: {{transport: stdio, command: {command}}}}}\n"
        f"  - {{name: remote, upstream: {upstream}}}\n"
    )
    config = write_config(tmp_path, port, routes=routes)
    log = tmp_path / "gateway.log"
    proc = start_process(config, port, log=log)
    proc.terminate()
    assert proc.wait(15) == 0
    said = log.read_text()
    base = f"http://127.0.0.1:{port}"
    assert f"configuration: {config}" in said
    assert f"listening on {base}" in said
    # "python" is the gateway's own interpreter; the arguments are not shown.
    assert f"route demo: {base}/demo/mcp -> stdio {sys.executable}\n" in said
    assert f"route remote: {base}/remote/mcp -> streamable_http http://127.0.0.1:9/mcp" in said
    assert f"health: {base}/healthz (and /livez, /readyz)" in said
    assert f"metrics: {base}/metrics" in said
    assert said.index("shutting down") < said.index("stopped")
    assert "s3cret" not in said  # neither the URL's credentials nor the command's arguments


def _log_until(log: Path, *lines: str) -> str:
    """The log once every one of `lines` is in it (within 20 s)."""
    deadline = time.monotonic() + 20
    while not all(line in (said := log.read_text()) for line in lines):
        assert time.monotonic() < deadline, f"not logged: {lines}\n{said}"
        time.sleep(0.05)
    return said


async def test_an_upstream_that_does_not_answer_is_a_warning_naming_its_route_yet_it_serves(
    tmp_path: Path,
) -> None:
    port = free_port()
    remote = json.dumps("http://user:s3cret@127.0.0.1:9/mcp?token=s3cret")
    routes = (
        "routes:\n"
        "  - {name: demo, upstream: {transport: stdio, command: [python, -m, gateway.demo]}}\n"
        f"  - {{name: remote, upstream: {{transport: streamable_http, url: {remote}}}}}\n"
        "  - {name: gone, upstream: {transport: stdio, command: [no-such-mcp-server, s3cret]}}\n"
    )
    log = tmp_path / "gateway.log"
    proc = start_process(write_config(tmp_path, port, routes=routes), port, log=log)
    try:
        said = _log_until(
            log,
            "WARNING gateway: route remote: upstream streamable_http http://127.0.0.1:9/mcp "
            "failed its check (initialize, tools/list): cannot reach the upstream",
            "WARNING gateway: route gone: upstream stdio no-such-mcp-server failed its check "
            "(initialize, tools/list): cannot start stdio upstream 'no-such-mcp-server'",
            f"INFO gateway: route demo: upstream stdio {sys.executable} answered: protocol "
            f"2025-11-25, {len(DEMO_TOOLS)} tools",
        )
        # Logged after the lines that say where everything is, and the gateway serves on.
        assert said.index("metrics: ") < said.index("route remote: upstream")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert resp.status == 200
            url = f"http://127.0.0.1:{port}/demo/mcp"
            assert await open_session(http, url)
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    assert "s3cret" not in log.read_text()


def _gateway(tmp_path: Path, extra: str) -> tuple[subprocess.Popen[bytes], int, Path, Path]:
    """The command with its stdout and stderr in files of their own, once it listens."""
    port = free_port()
    config = write_config(tmp_path, port, extra)
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    return start_process(config, port, log=err, audit=out), port, out, err


def _json_lines(text: str) -> list[dict[str, object]]:
    found = []
    for line in text.splitlines():
        try:
            found.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return found


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
async def test_audit_lines_go_to_stdout_apart_from_the_log_unless_stderr_is_asked_for(
    tmp_path: Path, stream: str
) -> None:
    extra = "" if stream == "stdout" else "audit: {stream: stderr}"
    proc, port, out, err = _gateway(tmp_path, extra)
    try:
        async with aiohttp.ClientSession() as http:
            await open_session(http, f"http://127.0.0.1:{port}/demo/mcp")
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    stdout, stderr = out.read_text(), err.read_text()
    assert f"audit log: {stream} (JSON lines)" in stderr
    if stream == "stdout":
        # Every stdout line is an audit event; no stderr line is one.
        events = [json.loads(line) for line in stdout.splitlines()]
        assert [e["event"] for e in events] == ["session_created"]
        assert _json_lines(stderr) == []
        assert "shutting down" in stderr and "shutting down" not in stdout
    else:
        assert stdout == ""
        assert [e["event"] for e in _json_lines(stderr)] == ["session_created"]


async def test_a_route_a_reload_adds_gets_the_line_start_up_gives_each_route(
    tmp_path: Path,
) -> None:
    # Issue 38: "the start-up line per route and the line a reload prints for an added route
    # name its URL and upstream the same way".
    port = free_port()
    secret_url = json.dumps("http://user:s3cret@127.0.0.1:9/mcp?token=s3cret")
    # The demo with a secret among its arguments, which it never sees (see the first test).
    run_demo = "import sys; sys.argv[1:] = []; from gateway.demo.stdio import main; main()"
    command = json.dumps(["python", "-c", run_demo, "--key", "s3cret"])
    members = (
        f"[{{name: s, transport: streamable_http, url: {secret_url}}}, "
        f"{{name: f, transport: stdio, command: {command}}}]"
    )
    first = f"routes:\n  - {{name: work, upstreams: {members}}}\n"
    config = write_config(tmp_path, port, routes=first)
    log = tmp_path / "gateway.log"
    proc = start_process(config, port, log=log)
    try:
        base = f"http://127.0.0.1:{port}"
        upstreams = f"s=streamable_http http://127.0.0.1:9/mcp, f=stdio {sys.executable}"
        _log_until(log, f"route work: {base}/work/mcp -> {upstreams}\n")
        added = (
            f"{first}  - {{name: again, upstreams: {members}}}\n"
            f"  - {{name: plain, upstream: {{transport: streamable_http, url: {secret_url}}}}}\n"
        )
        write_config(tmp_path, port, routes=added)
        proc.send_signal(signal.SIGHUP)
        said = _log_until(
            log,
            "routes added: again, plain",
            f"INFO gateway.reload: route again: {base}/again/mcp -> {upstreams}\n",
            f"INFO gateway.reload: route plain: {base}/plain/mcp -> streamable_http "
            "http://127.0.0.1:9/mcp\n",
        )
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    assert said.index("routes added") < said.index("route plain: ")
    assert "s3cret" not in log.read_text()


def test_with_port_0_the_log_gives_the_ports_the_os_chose_and_they_answer(
    tmp_path: Path,
) -> None:
    """`listen.port: 0` was logged as `http://127.0.0.1:0`, at start and for a route a reload
    added, and so was `metrics.listen`'s."""
    metrics = "metrics: {listen: {host: 127.0.0.1, port: 0}}"
    config = write_config(tmp_path, 0, extra=metrics)
    log = tmp_path / "gateway.log"
    with log.open("wb") as err:
        command = [sys.executable, "-m", "gateway", "--config", str(config)]
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    try:
        said = _log_until(log, "metrics: ")
        listening = re.search(r"listening on (http://127\.0\.0\.1:(\d+))\n", said)
        exported = re.search(r"metrics: (http://127\.0\.0\.1:(\d+)/metrics)\n", said)
        assert listening is not None and exported is not None, said
        base, port = listening[1], int(listening[2])
        assert port != 0 and int(exported[2]) not in (0, port)
        assert f"route demo: {base}/demo/mcp -> " in said
        assert f"health: {base}/healthz" in said
        for url in (f"{base}/healthz", exported[1]):
            with urllib.request.urlopen(url, timeout=10) as resp:
                assert resp.status == 200
        sse = "{transport: sse, url: 'http://127.0.0.1:9/sse'}"
        again = DEMO_ROUTE.removesuffix("]") + f", {{name: again, upstream: {sse}}}]"
        write_config(tmp_path, 0, extra=metrics, routes=again)
        proc.send_signal(signal.SIGHUP)
        _log_until(log, f"INFO gateway.reload: route again: {base}/again/mcp -> sse ")
    finally:
        proc.terminate()
        assert proc.wait(15) == 0


async def test_a_stdio_child_that_exits_at_once_shows_its_last_stderr_lines_in_the_warning(
    tmp_path: Path,
) -> None:
    # Issue 38: "a stdio child that exits at once shows the last lines of its stderr in
    # `config check` and the start-up warning"; megabytes of it are cut to the last lines.
    port = free_port()
    spew = (
        "import sys; sys.stderr.write('noise ' * 1000 + '\\n') ; "
        "[sys.stderr.write(f'line {n}\\n') for n in range(20000)]; "
        "sys.stderr.buffer.write(b'\\xff\\xfe\\x1b[2J binary\\n'); "
        "sys.stderr.write('early: error: unrecognized arguments: --bad\\n'); sys.exit(2)"
    )
    command = json.dumps(["python", "-c", spew, "--bad"])
    routes = f"routes:\n  - {{name: early, upstream: {{transport: stdio, command: {command}}}}}\n"
    log = tmp_path / "gateway.log"
    proc = start_process(write_config(tmp_path, port, routes=routes), port, log=log)
    try:
        said = _log_until(log, "WARNING gateway: route early: upstream stdio")
    finally:
        proc.terminate()
        assert proc.wait(15) == 0
    (warning,) = [line for line in said.splitlines() if "WARNING gateway: route early" in line]
    tail = " | ".join(f"line {n}" for n in range(19992, 20000))
    # Bytes that are not UTF-8 read as U+FFFD; a terminal escape is written out, not obeyed.
    assert warning.endswith(
        "failed its check (initialize, tools/list): the stdio upstream process exited with "
        f"code 2; its stderr ended: {tail} | \ufffd\ufffd\\x1b[2J binary | early: error: "
        "unrecognized arguments: --bad; the gateway serves, and this route's calls fail until "
        "its upstream answers"
    )
    assert len(warning) < 2000 and "Traceback" not in said


def test_with_an_admin_section_the_log_names_the_admin_api_and_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADMIN_TOKEN", "a-token-for-the-start-up-line-test")
    port, admin_port = free_port(), free_port()
    admin = f"admin: {{listen: {{host: 127.0.0.1, port: {admin_port}}}, token_env: ADMIN_TOKEN}}"
    config = write_config(tmp_path, port, extra=admin)
    log = tmp_path / "gateway.log"
    proc = start_process(config, port, log=log)
    proc.terminate()
    assert proc.wait(15) == 0
    said = log.read_text()
    admin_base = f"http://127.0.0.1:{admin_port}"
    assert f"admin API: {admin_base}/admin/ (its token in ADMIN_TOKEN)" in said
    assert f"console: {admin_base}/admin/console/ (sign in with that token)" in said
    assert "a-token-for-the-start-up-line-test" not in said


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("", "http://0.0.0.0:8080"),  # every address: `http://:8080` was logged
        ("0.0.0.0", "http://0.0.0.0:8080"),
        ("::1", "http://[::1]:8080"),
        ("127.0.0.1", "http://127.0.0.1:8080"),
    ],
)
def test_a_listeners_logged_url_is_a_url_for_every_host(host: str, url: str) -> None:
    assert announce.base_url(ListenConfig(host=host, port=8080)) == url
