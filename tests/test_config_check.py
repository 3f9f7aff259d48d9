"""`mcp-task-gateway config check --config FILE`, run as its own process against real upstreams:
the SDK's FastMCP server over Streamable HTTP, a legacy HTTP+SSE server and a stdio child.

Exit 0 and a table when every upstream answers initialize and tools/list; exit 2 naming the
file and key for a file that cannot be used, every unset variable, or the route whose upstream
does not answer; never a secret's value.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.commands.config_check import HEADER, tasks
from gateway.commands.config_check import main as config_check_main
from gateway.config import TaskPolicy
from gateway.demo.tools import DEMO_TOOLS

from .conftest import ROOT
from .fakes import legacy_sse_app
from .helpers import alive, pids

SECRET = "s3cret-value-never-shown"
STDIO_UPSTREAM = str(ROOT / "tests" / "stdio_upstream.py")
#: tests/stdio_upstream.py serves the demo's tools and three more.
STDIO_TOOLS = len(DEMO_TOOLS) + 3


async def config_check(
    *args: str, env: dict[str, str] | None = None, seconds: float = 60
) -> tuple[int, str, str]:
    """The command as its own process: exit status, stdout, stderr. Async, so that upstreams
    served by this test's event loop can answer it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        "config",
        "check",
        *args,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(seconds):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def rows(stdout: str) -> dict[str, list[str]]:
    """The table by route: its cells (TASKS may hold spaces; MODERN, the last, does not)."""
    header, *lines = stdout.splitlines()
    assert header.split() == list(HEADER)
    table = {}
    for line in lines:
        rest, modern = line.rsplit(None, 1)
        cells = rest.split(None, 4)
        table[cells[0]] = [*cells, modern]
    return table


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return str(path)


async def test_every_upstream_answering_gets_exit_0_and_a_row_per_route_with_its_tools(
    tmp_path: Path, sdk_upstream: str, aiohttp_server: Any
) -> None:
    legacy: TestServer = await aiohttp_server(legacy_sse_app())
    sse_url = f"http://127.0.0.1:{legacy.port}/sse"
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    command = json.dumps(["python", STDIO_UPSTREAM, "--pid-dir", str(pid_dir)])
    config = write(
        tmp_path,
        "routes:\n"
        f"  - name: local\n"
        f"    upstream: {{transport: stdio, command: {command}}}\n"
        "    tasks: {tools: {slow: required, echo: forbidden}, repeatable: annotated}\n"
        f"  - name: sdk\n"
        f"    upstream: {{transport: streamable_http, url: {json.dumps(sdk_upstream)}}}\n"
        f"  - name: legacy\n"
        f"    upstream: {{transport: sse, url: {json.dumps(sse_url)}}}\n"
        "    tasks: {enabled: false}\n",
    )
    code, out, err = await config_check("--config", config)
    assert code == 0, err
    table = rows(out)
    assert list(table) == ["local", "sdk", "legacy"]
    assert table["local"] == [
        "local",
        "stdio",
        sys.executable,  # `python` is the gateway's own interpreter; arguments are not shown
        str(STDIO_TOOLS),
        "optional; required: slow; forbidden: echo; repeatable: annotated",
        "bridge",  # stdio: 2026-07-28 callers are always bridged
    ]
    assert table["sdk"][1:3] == ["streamable_http", sdk_upstream]
    assert int(table["sdk"][3]) > 0 and table["sdk"][4] == "optional"
    # mcp 1.30's server answers server/discover with -32601: `auto` bridges it.
    assert table["sdk"][5] == "bridge(auto)"
    assert table["legacy"] == ["legacy", "sse", sse_url, str(len(DEMO_TOOLS)), "off", "bridge"]
    assert f"{config}: valid, and every upstream answered" in err
    # The stdio child was started for the check, and is gone with it.
    (child,) = pids(pid_dir)
    assert not alive(child)


async def test_an_unreachable_upstream_is_exit_2_naming_the_route_never_the_urls_secrets(
    tmp_path: Path,
) -> None:
    url = "http://user:${PASSWORD}@127.0.0.1:9/mcp?token=${PASSWORD}"
    config = write(
        tmp_path,
        "routes:\n"
        "  - {name: demo, upstream: {transport: stdio, command: [python, -m, gateway.demo]}}\n"
        f"  - {{name: remote, upstream: {{transport: streamable_http, url: '{url}'}}}}\n"
        "  - {name: legacy, upstream: {transport: sse, url: 'http://127.0.0.1:9/sse'}}\n",
    )
    code, out, err = await config_check("--config", config, env={"PASSWORD": SECRET})
    assert code == 2
    table = rows(out)
    assert table["demo"][3] == str(len(DEMO_TOOLS))
    assert table["remote"][1:4] == ["streamable_http", "http://127.0.0.1:9/mcp", "-"]
    assert table["legacy"][3] == "-"
    assert f"{config}: route remote: upstream check (initialize, tools/list) failed: " in err
    assert f"{config}: route legacy: upstream check" in err
    assert "route demo" not in err
    assert "2 of 3 upstream(s) failed" in err
    assert SECRET not in out + err


async def test_a_stdio_command_that_does_not_exist_is_exit_2_naming_route_and_program(
    tmp_path: Path,
) -> None:
    config = write(
        tmp_path,
        "routes:\n"
        "  - name: tools\n"
        "    upstream: {transport: stdio, command: [no-such-mcp-server, --token, '${TOKEN}']}\n",
    )
    code, out, err = await config_check("--config", config, env={"TOKEN": SECRET})
    assert code == 2
    assert rows(out)["tools"][1:4] == ["stdio", "no-such-mcp-server", "-"]
    assert "route tools: upstream check" in err
    assert "cannot start stdio upstream 'no-such-mcp-server': No such file or directory" in err
    assert SECRET not in out + err


async def test_tools_shows_what_a_client_sees_of_what_the_upstream_or_member_lists(
    tmp_path: Path, sdk_upstream: str
) -> None:
    """`seen/listed` where `tools:` curates, by member on a route of several; a route that
    curates nothing shows the count alone."""
    child = {"transport": "stdio", "command": ["python", STDIO_UPSTREAM]}
    sdk = {"transport": "streamable_http", "url": sdk_upstream}
    routes = [
        {"name": "plain", "upstream": child},
        {
            "name": "curated",
            "upstream": child,
            "tools": {"allow": ["e*", "s*"], "deny": ["error"], "rename": {"crash": "boom"}},
        },
        {
            "name": "pair",
            "upstreams": [{"name": "local", **child}, {"name": "sdk", **sdk}],
            "tools": {"deny": ["sdk__*"]},
        },
        {"name": "one", "upstreams": [{"name": "only", **child}], "tools": {"deny": ["echo"]}},
    ]
    config = write(tmp_path, json.dumps({"routes": routes}))  # JSON is YAML
    code, out, err = await config_check("--config", config)
    assert code == 0, err
    table = rows(out)
    assert {name: row[3] for name, row in table.items() if name != "pair/sdk"} == {
        "plain": str(STDIO_TOOLS),
        # echo, environment, slow, sample: error is denied, crash is boom, which no glob allows
        "curated": f"4/{STDIO_TOOLS}",
        "pair/local": f"{STDIO_TOOLS}/{STDIO_TOOLS}",
        "one/only": f"{STDIO_TOOLS - 1}/{STDIO_TOOLS}",  # one member: its own names
    }
    seen, listed = table["pair/sdk"][3].split("/")
    assert seen == "0" and int(listed) > 0


async def test_an_upstream_slower_than_the_timeout_fails_it_and_its_child_is_stopped(
    tmp_path: Path,
) -> None:
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    # Writes its pid, then reads nothing and answers nothing.
    pid_file = f"os.path.join({str(pid_dir)!r}, str(os.getpid()))"
    mute = f"import os, time; open({pid_file}, 'w'); time.sleep(60)"
    command = json.dumps(["python", "-c", mute])
    config = write(
        tmp_path,
        f"routes:\n  - {{name: mute, upstream: {{transport: stdio, command: {command}}}}}\n",
    )
    started = time.monotonic()
    code, out, err = await config_check("--config", config, "--timeout", "1")
    assert code == 2
    # stdin closed, then SIGTERM after 2 s: well under the child's 60 s sleep, even with the
    # command's own start (seconds of CPU) slowed by test workers and CI's other sections
    assert time.monotonic() - started < 45
    assert "route mute: upstream check (initialize, tools/list) failed: no answer to " in err
    assert "within 1 s" in err
    (child,) = pids(pid_dir)
    assert not alive(child)


async def test_an_invalid_file_is_exit_2_naming_the_file_and_the_key_path(tmp_path: Path) -> None:
    config = write(
        tmp_path,
        "routes:\n"
        "  - name: r\n"
        "    upstream: {transport: sse, url: 'ftp://127.0.0.1/sse'}\n"
        "    tasks: {defualt: required}\n",
    )
    code, out, err = await config_check("--config", config)
    assert code == 2
    assert out == ""  # no upstream is asked about an unusable file
    assert f"{config}: routes[0].upstream.url: must be an http:// or https:// URL" in err
    assert f"{config}: routes[0].tasks.defualt: unknown key" in err


async def test_every_unset_variable_is_named_and_no_set_secret_is_ever_shown(
    tmp_path: Path,
) -> None:
    config = write(
        tmp_path,
        "auth:\n"
        "  mode: api_keys\n"
        "  api_keys:\n"
        "    - {principal: bob, key_env: BOB_KEY}\n"
        "    - {principal: al, key_env: AL_KEY}\n"
        "routes:\n"
        "  - name: r\n"
        "    upstream:\n"
        "      transport: streamable_http\n"
        "      url: 'http://${UPSTREAM_HOST}:9/mcp'\n"
        "      headers: {Authorization: 'Bearer ${UPSTREAM_TOKEN}', X-Tenant: '${TENANT}'}\n",
    )
    env = {"AL_KEY": SECRET, "UPSTREAM_TOKEN": SECRET + "-token"}
    code, out, err = await config_check("--config", config, env=env)
    assert code == 2
    assert f"{config}: routes[0].upstream.url: environment variable UPSTREAM_HOST is not set" in err
    assert "routes[0].upstream.headers.X-Tenant: environment variable TENANT is not set" in err
    assert "auth.api_keys[0].key_env: environment variable BOB_KEY is not set" in err
    assert "AL_KEY" not in err and "UPSTREAM_TOKEN" not in err  # those are set
    # Once every ${VAR} is set, a missing key_env is still named, by the key's section.
    env |= {"UPSTREAM_HOST": "127.0.0.1", "TENANT": "t"}
    code, out, again = await config_check("--config", config, env=env)
    assert code == 2
    assert f"{config}: auth.api_keys[0]: environment variable BOB_KEY is not set" in again
    assert SECRET not in out + err + again


async def test_a_path_that_is_missing_or_a_directory_is_exit_2_naming_it(tmp_path: Path) -> None:
    missing, folder = str(tmp_path / "missing.yaml"), str(tmp_path)
    (code, out, err), (code2, out2, err2) = await asyncio.gather(
        config_check("--config", missing), config_check("--config", folder)
    )
    assert (code, out, code2, out2) == (2, "", 2, "")
    assert f"{missing}: cannot read the configuration: No such file or directory" in err
    assert f"{folder}: cannot read the configuration: Is a directory" in err2
    assert "Traceback" not in err + err2


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "routes: required: list at least one route"),
        (b"\xff\xfe\x00\x01routes", "not UTF-8 text (byte 0)"),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply to be a configuration"),
        (b"- routes\n", "the top level must be a mapping of keys"),
        (b"routes:\n\t- name: r\n", "not valid YAML: line 2, column 1"),
    ],
)
def test_careless_contents_are_exit_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, said: str
) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_bytes(content)
    assert config_check_main(["check", "--config", str(path)]) == 2
    assert f"{path}: {said}" in capsys.readouterr().err


async def test_without_a_file_the_built_in_demo_settings_are_checked() -> None:
    code, out, err = await config_check()
    assert code == 0, err
    assert rows(out)["demo"][1:4] == ["stdio", sys.executable, str(len(DEMO_TOOLS))]
    assert "built-in settings: valid, and every upstream answered" in err


async def test_an_upstream_refusing_the_check_fails_unless_it_wants_a_callers_identity(
    tmp_path: Path, aiohttp_server: Any
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=401, text="who are you?")

    app = web.Application()
    app.router.add_route("*", "/mcp", refuse)
    server: TestServer = await aiohttp_server(app)
    url = f"http://127.0.0.1:{server.port}/mcp"
    config = write(
        tmp_path,
        "auth: {mode: api_keys, api_keys: [{principal: bob, key_env: BOB_KEY}]}\n"
        "routes:\n"
        f"  - name: static\n"
        f"    upstream: {{transport: streamable_http, url: '{url}'}}\n"
        f"  - name: signed\n"
        f"    upstream:\n"
        f"      transport: streamable_http\n"
        f"      url: '{url}'\n"
        f"      identity: {{mode: signed_assertion, key_env: SIGNING_KEY}}\n",
    )
    env = {"BOB_KEY": SECRET, "SIGNING_KEY": SECRET * 2}
    code, out, err = await config_check("--config", config, env=env)
    assert code == 2  # a static route refused is what every call of it would get
    table = rows(out)
    assert (table["static"][3], table["signed"][3]) == ("-", "?")
    assert "route static: upstream check (initialize, tools/list) failed: " in err
    assert "the upstream answered HTTP 401" in err
    assert "route signed: its upstream answered, but refuses a request without a caller" in err
    assert "1 of 2 upstream(s) failed" in err
    assert SECRET not in out + err


def test_a_task_policy_reads_in_a_few_words() -> None:
    assert tasks(TaskPolicy()) == "optional"
    assert tasks(TaskPolicy(enabled=False, default="required")) == "off"
    policy = TaskPolicy(
        default="forbidden",
        tools={"build": "required", "lookup": "forbidden", "render": "optional", "a": "required"},
        repeatable=("build", "render"),
    )
    assert (
        tasks(policy)
        == "forbidden; required: a, build; optional: render; repeatable: build, render"
    )
