"""`mcp-task-gateway --help` explains the whole command, run as its own process: every command
beside serving, one line each, each listing its own sub-commands under `COMMAND --help`; an
unknown command is an error that lists the known ones; the server's own options work as
before (scripts and the image use them)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway import __version__

from .conftest import ROOT


def command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_lists_every_command_with_one_line_each_and_the_servers_options() -> None:
    done = command("--help")

    assert done.returncode == 0 and done.stderr == ""
    lines = done.stdout.splitlines()
    # Issue 38: "`mcp-task-gateway --help` lists every subcommand (`config check`, `tasks`,
    # `sessions`, `store`) with one line each".
    start = lines.index("commands (without one, the gateway serves):")
    listed = {line.split("  ")[1].strip(): line for line in lines[start + 1 : start + 5]}
    assert list(listed) == ["config check", "tasks", "sessions", "store"]
    assert all(len(line) <= 100 for line in listed.values())
    assert "`mcp-task-gateway COMMAND --help` tells what each takes." in lines
    for option in ("--config", "--host", "--port", "--log-level", "--debug-libraries"):
        assert f"  {option}" in done.stdout


@pytest.mark.parametrize(
    ("group", "commands"),
    [
        (["tasks"], ["list", "purge", "show", "cancel"]),
        (["sessions"], ["list", "end"]),
        (["config"], ["check"]),
        (["store"], ["backup", "erase"]),
    ],
)
def test_each_command_lists_its_own_sub_commands(group: list[str], commands: list[str]) -> None:
    done = command(*group, "--help")

    assert done.returncode == 0
    assert f"usage: mcp-task-gateway {group[0]} " in done.stdout
    assert "{" + ",".join(commands) + "}" in done.stdout
    listed = [line.split()[0] for line in done.stdout.splitlines() if line.startswith("    ")]
    assert [name for name in listed if name in commands] == commands


def test_purge_help_names_its_filters_all_and_dry_run() -> None:
    done = command("tasks", "purge", "--help")

    assert done.returncode == 0
    for option in ("--route", "--principal", "--status", "--older-than", "--all", "--dry-run"):
        assert option in done.stdout


@pytest.mark.parametrize(
    ("word", "shown"),
    [
        ("serve", "'serve'"),
        ("task", "'task'"),
        ("\x1b[31mred", "'\\x1b[31mred'"),  # a terminal escape is shown, not obeyed
        ("x" * 5000, "'" + "x" * 40 + "...(5000 chars)'"),
    ],
)
def test_an_unknown_command_is_exit_2_listing_the_commands(word: str, shown: str) -> None:
    done = command(word, "--config", "x.yaml")

    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.splitlines()[-1]
    assert last == (
        f"mcp-task-gateway: error: unknown command {shown}: the commands are config check, "
        "tasks, sessions, store (or none, to serve)"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--port", "99999"], "argument --port: '99999' is not a port (0 to 65535)"),
        (["--port", "-1"], "argument --port: '-1' is not a port (0 to 65535)"),
        (["--host", "127.0.0.1\t"], "argument --host: '127.0.0.1\\t' holds a control character"),
    ],
)
def test_a_port_or_host_the_settings_would_refuse_is_refused_on_the_command_line_too(
    args: list[str], said: str
) -> None:
    """They replace values the settings checked, past those checks: a port of 99999 was
    bound modulo 65536 and logged as 99999; a NUL in a host was a traceback."""
    done = command(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert said in done.stderr


NOT_UTF8 = os.fsdecode(b"caf\xe9")  # as the shell hands such bytes to Python


@pytest.mark.parametrize(
    "args",
    [
        ["tasks", "list", "--principal", NOT_UTF8],
        ["tasks", "purge", "--route", NOT_UTF8, "--dry-run"],
        ["tasks", "show", NOT_UTF8],
        ["sessions", "end", NOT_UTF8],
        ["sessions", "list", "--principal", NOT_UTF8],
        ["store", "erase", "--principal", NOT_UTF8],
    ],
)
def test_a_name_or_id_that_is_not_utf8_is_refused_in_one_line(args: list[str]) -> None:
    """It went into a URL or a statement that could not encode it: a traceback."""
    config = [] if args[0] == "store" else ["--config", "unread.yaml"]
    done = command(*args, *config)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "'caf\\udce9' holds a byte that is not UTF-8" in done.stderr


def test_the_servers_options_work_as_before() -> None:
    assert command("--version").stdout.strip() == f"mcp-task-gateway {__version__}"
    bad_port = command("--port", "eighty")
    assert bad_port.returncode == 2
    assert "argument --port: 'eighty' is not a port (0 to 65535)" in bad_port.stderr
    bad_level = command("--log-level", "LOUD")
    assert bad_level.returncode == 2 and "unknown log level 'LOUD'" in bad_level.stderr
    assert "Traceback" not in bad_port.stderr + bad_level.stderr


@pytest.mark.parametrize(
    ("args", "unneeded"),
    [
        (["--version"], {"gateway.app", "gateway.config", "aiohttp"}),
        (["--help"], {"gateway.app", "gateway.config", "aiohttp"}),
        (["tasks", "--help"], {"gateway.app", "gateway.tasks.store", "aiohttp", "asyncpg"}),
        (["sessions", "--help"], {"gateway.app", "gateway.tasks.store", "aiohttp", "asyncpg"}),
    ],
)
def test_a_command_imports_only_what_it_runs(args: list[str], unneeded: set[str]) -> None:
    """The whole gateway takes a second and a half of CPU to import: an operator's `tasks list`
    or `--version`, and the scripts that call them in a loop, pay only for what they use."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gateway", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert imported.isdisjoint(unneeded), sorted(imported & unneeded)
