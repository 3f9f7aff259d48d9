"""A stdio upstream for tests: the demo's tools plus `crash`, `ask_twice` and `environment`,
with knobs the demo lacks.

`python tests/stdio_upstream.py [--only-version V] [--pid-dir DIR]`: speaks only protocol
version V if given, and writes a file named after its pid into DIR so tests can watch the
real process come and go.

It asks at once and answers under the id it was asked with, on the one stream stdio has. It
bends on one point, its core's (`LegacyServer` starts a second call under an id already in
flight, where an SDK server would cross them): a stdio child has one client, whose ids come
from one counter, so none can arrive twice.
"""

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import NoReturn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.demo.server import PROTOCOL_VERSIONS, Message, Tool, ToolContext, text_result
from gateway.demo.stdio import serve_stdio
from gateway.demo.tools import DEMO_TOOLS, NAME_SCHEMA, NoArgs


async def crash(ctx: ToolContext, args: NoArgs) -> NoReturn:
    os._exit(3)  # dies mid-call, as a segfaulting or OOM-killed server would


async def _typed_crash(ctx: ToolContext, args: NoArgs) -> Message:
    await crash(ctx, args)


async def ask_twice(ctx: ToolContext, args: NoArgs) -> Message:
    """Two questions at once: the task waits on both before it can go on."""
    first, second = await asyncio.gather(
        ctx.elicit("First name?", NAME_SCHEMA), ctx.elicit("Last name?", NAME_SCHEMA)
    )
    names = [a["content"]["name"] if a.get("action") == "accept" else "?" for a in (first, second)]
    return text_result(" ".join(names))


async def environment(ctx: ToolContext, args: NoArgs) -> Message:
    return text_result(json.dumps(dict(os.environ)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only-version")
    parser.add_argument("--pid-dir")
    args = parser.parse_args()
    if args.pid_dir:
        (Path(args.pid_dir) / str(os.getpid())).touch()
    versions = (args.only_version,) if args.only_version else PROTOCOL_VERSIONS
    tools = (
        *DEMO_TOOLS,
        Tool("crash", "Exits the process mid-call.", NoArgs, _typed_crash),
        Tool("ask_twice", "Asks two questions at once.", NoArgs, ask_twice),
        Tool("environment", "Returns the process's environment.", NoArgs, environment),
    )
    asyncio.run(serve_stdio(tools, versions))


if __name__ == "__main__":
    main()
