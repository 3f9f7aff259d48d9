"""What `config check` says beyond its table, run as its own process: whether the store and the
audit file can be written (named by their keys, nothing created), the `--json` document, and
the last lines a stdio child that exited at once wrote to stderr.

Issue 38: "`config check` also checks that the store path and `audit.file` can be written and
offers `--json`"; "a stdio child that exits at once shows the last lines of its stderr in
`config check` and the start-up warning".
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gateway.commands.config_check import HEADER
from gateway.demo.tools import DEMO_TOOLS

from .test_config_check import SECRET, config_check, rows

DEMO = "  - {name: demo, upstream: {transport: stdio, command: [python, -m, gateway.demo]}}\n"


def write(tmp_path: Path, store: str, audit: str | None = None, routes: str = DEMO) -> str:
    config = tmp_path / "gateway.yaml"
    lines = [f"store: {{path: {json.dumps(store)}}}"]
    if audit is not None:
        lines.append(f"audit: {{file: {json.dumps(audit)}}}")
    config.write_text("\n".join([*lines, "routes:", routes]))
    return str(config)


def files(where: Path) -> list[str]:
    return sorted(str(path.relative_to(where)) for path in where.rglob("*"))


async def test_a_store_and_audit_file_that_can_be_written_pass_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    kept = tmp_path / "kept.log"
    kept.write_text("an earlier line\n")
    config = write(tmp_path, str(tmp_path / "new" / "dirs" / "gateway.db"), str(kept))
    before = files(tmp_path)

    code, out, err = await config_check("--config", config)

    assert code == 0, err
    assert list(rows(out)) == ["demo"]
    # The store's directories are the gateway's to make, when it starts: not the check's.
    assert files(tmp_path) == before and kept.read_text() == "an earlier line\n"


@pytest.mark.parametrize(
    ("store", "audit", "says"),
    [
        (
            "{tmp}/db.txt/gateway.db",
            None,
            "store.path: {tmp}/db.txt/gateway.db is under {tmp}/db.txt, which is not a directory",
        ),
        ("{tmp}", None, "store.path: {tmp} is a directory, not a file"),
        ("{tmp}/notes.db", None, "store.path: {tmp}/notes.db is not a SQLite database"),
        ("/dev/zero", None, "store.path: /dev/zero is not a regular file"),
        (
            "{tmp}/gateway.db",
            "{tmp}/no/such/dir/audit.log",
            "audit.file: {tmp}/no/such/dir/audit.log is in {tmp}/no/such/dir, which does not "
            "exist (the gateway does not create it)",
        ),
        ("{tmp}/gateway.db", "{tmp}", "audit.file: {tmp} is a directory, not a file"),
        ("{tmp}/gateway.db", "{tmp}/a\x00b.log", "audit.file: {tmp}/a\\x00b.log is not a path"),
        (
            "{tmp}/\x1b[2J.db/x.db",
            None,
            "store.path: {tmp}/\\x1b[2J.db/x.db is under {tmp}/\\x1b[2J.db, which is not a",
        ),
    ],
)
async def test_a_file_the_gateway_could_not_write_is_exit_2_naming_its_key(
    tmp_path: Path, store: str, audit: str | None, says: str
) -> None:
    (tmp_path / "db.txt").write_text("")
    (tmp_path / "\x1b[2J.db").write_text("")
    (tmp_path / "notes.db").write_text("once, the gateway failed to start on this\n")
    tmp = str(tmp_path)
    config = write(tmp_path, store.format(tmp=tmp), audit and audit.format(tmp=tmp))
    before = files(tmp_path)

    code, out, err = await config_check("--config", config)

    assert code == 2
    assert f"{config}: {says.format(tmp=tmp)}" in err
    assert err.splitlines()[-1] == "mcp-task-gateway: 1 file(s) the gateway could not write"
    assert list(rows(out)) == ["demo"]  # the upstreams are checked all the same
    assert files(tmp_path) == before and "Traceback" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes wherever it likes")
async def test_an_audit_directory_or_store_file_without_write_permission_is_exit_2(
    tmp_path: Path,
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    store = tmp_path / "gateway.db"
    store.write_text("")
    store.chmod(0o400)
    locked.chmod(0o500)
    try:
        config = write(tmp_path, str(store), str(locked / "audit.log"))
        code, _, err = await config_check("--config", config)
    finally:
        locked.chmod(0o700)
    assert code == 2
    assert f"store.path: {store} is not writable by this user" in err
    assert f"audit.file: {locked}/audit.log is in {locked}, where this user cannot create" in err


async def test_json_is_one_document_of_routes_problems_and_ok(tmp_path: Path) -> None:
    remote = "http://user:${PASSWORD}@127.0.0.1:9/mcp?token=${PASSWORD}"
    routes = (
        f"{DEMO}  - {{name: remote, upstream: {{transport: streamable_http, url: '{remote}'}}}}\n"
    )
    config = write(tmp_path, str(tmp_path / "gateway.db"), str(tmp_path / "none" / "a.log"), routes)

    code, out, err = await config_check("--config", config, "--json", env={"PASSWORD": SECRET})

    assert code == 2
    document = json.loads(out)
    assert document["config"] == config and document["ok"] is False
    assert [row["route"] for row in document["routes"]] == ["demo", "remote"]
    demo, remote_row = document["routes"]
    assert set(demo) == {name.lower() for name in HEADER} | {"state"}
    assert demo["tools"] == str(len(DEMO_TOOLS)) and demo["state"] == "answered"
    assert remote_row["upstream"] == "http://127.0.0.1:9/mcp" and remote_row["state"] == "failed"
    file_problem, route_problem = document["problems"]
    assert file_problem["key"] == "audit.file" and "does not exist" in file_problem["message"]
    assert route_problem["route"] == "remote" and route_problem["stderr"] == []
    assert route_problem["message"].startswith("upstream check (initialize, tools/list) failed")
    assert "route remote: upstream check" in err  # the lines for people are on stderr still
    assert SECRET not in out + err


async def test_json_for_a_file_that_does_not_load_is_a_document_too(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text("routes: [{name: demo}]\n")

    code, out, err = await config_check("--config", str(config), "--json")

    assert code == 2
    document: dict[str, Any] = json.loads(out)
    assert document["ok"] is False and document["routes"] == []
    (problem,) = document["problems"]
    assert problem["message"].startswith(f"configuration error:\n{config}")
    assert "configuration error" in err


def _dying(tmp_path: Path, program: str) -> str:
    command = json.dumps(["python", "-c", program, "--bad", "--token", "${TOKEN}"])
    routes = f"  - {{name: early, upstream: {{transport: stdio, command: {command}}}}}\n"
    return write(tmp_path, str(tmp_path / "gateway.db"), routes=routes)


async def test_a_stdio_child_that_exits_at_once_shows_the_last_lines_of_its_stderr(
    tmp_path: Path,
) -> None:
    program = (
        "import sys; print('usage: early [--port N]', file=sys.stderr); "
        "print('early: error: unrecognized arguments: --bad', file=sys.stderr); sys.exit(2)"
    )
    config = _dying(tmp_path, program)

    code, out, err = await config_check("--config", config, env={"TOKEN": SECRET})
    _, as_json, _ = await config_check("--config", config, "--json", env={"TOKEN": SECRET})

    assert code == 2
    assert rows(out)["early"][3] == "-"
    lines = err.splitlines()
    at = lines.index(
        f"{config}: route early: upstream check (initialize, tools/list) failed: the stdio "
        "upstream process exited with code 2"
    )
    assert lines[at + 1 : at + 4] == [
        "  the last lines of its stderr (2):",
        "  | usage: early [--port N]",
        "  | early: error: unrecognized arguments: --bad",
    ]
    (problem,) = json.loads(as_json)["problems"]
    assert problem["stderr"] == [
        "usage: early [--port N]",
        "early: error: unrecognized arguments: --bad",
    ]
    assert SECRET not in out + err + as_json


async def test_megabytes_of_binary_stderr_before_the_exit_come_to_ten_short_lines(
    tmp_path: Path,
) -> None:
    program = (
        "import sys; out = sys.stderr.buffer; out.write(b'x' * 3_000_000 + b'\\n'); "
        "[out.write(b'line %d \\x00\\xff\\x1b[2J\\n' % n) for n in range(50_000)]; "
        "out.write(b'y' * 100_000); out.flush(); sys.exit(3)"
    )
    config = _dying(tmp_path, program)

    code, out, err = await config_check("--config", config, "--json", env={"TOKEN": SECRET})

    assert code == 2
    (problem,) = json.loads(out)["problems"]
    said = problem["stderr"]
    assert said[:9] == [f"line {n} \\x00\ufffd\\x1b[2J" for n in range(49_991, 50_000)]
    assert said[9].startswith("y" * 300) and len(said[9]) < 350
    assert len(said) == 10 and len(err) < 10_000 and "Traceback" not in err
