"""The demo's tools: one of each kind of behaviour the gateway must carry across.

echo (a plain answer), slow (progress, and long enough to be a task), ask (elicitation),
sample (sampling), fail (an `isError` result), error (a JSON-RPC error), roots (roots/list),
log (notifications/message).
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field

from gateway.demo.server import Message, RpcError, Tool, ToolContext, text_result


class EchoArgs(BaseModel):
    text: str


class SlowArgs(BaseModel):
    seconds: float = Field(default=3, ge=0)
    steps: int = Field(default=5, ge=1)


class AskArgs(BaseModel):
    question: str = "What is your name?"


class SampleArgs(BaseModel):
    prompt: str


class LogArgs(BaseModel):
    message: str


class NoArgs(BaseModel):
    pass


NAME_SCHEMA: Message = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


async def echo(ctx: ToolContext, args: EchoArgs) -> Message:
    return text_result(args.text, structured={"text": args.text})


async def slow(ctx: ToolContext, args: SlowArgs) -> Message:
    for step in range(1, args.steps + 1):
        await asyncio.sleep(args.seconds / args.steps)
        await ctx.progress(step, args.steps, f"step {step}/{args.steps}")
    return text_result(f"slept {args.seconds:g} s")


async def ask(ctx: ToolContext, args: AskArgs) -> Message:
    answer = await ctx.elicit(args.question, NAME_SCHEMA)
    if answer.get("action") != "accept":
        return text_result(f"No answer ({answer.get('action')})")
    return text_result(f"Hello, {answer['content']['name']}!")


async def sample(ctx: ToolContext, args: SampleArgs) -> Message:
    reply = await ctx.sample(args.prompt)
    # Since 2025-11-25 the content may be a list of blocks.
    blocks = reply["content"] if isinstance(reply["content"], list) else [reply["content"]]
    return text_result("".join(block["text"] for block in blocks if block["type"] == "text"))


async def fail(ctx: ToolContext, args: NoArgs) -> Message:
    return text_result("the tool failed on purpose", is_error=True)


async def error(ctx: ToolContext, args: NoArgs) -> Message:
    raise RpcError(-32000, "upstream error on purpose")


async def roots(ctx: ToolContext, args: NoArgs) -> Message:
    listed = await ctx.list_roots()
    return text_result("\n".join(root["uri"] for root in listed["roots"]))


async def log(ctx: ToolContext, args: LogArgs) -> Message:
    await ctx.log("info", args.message)
    return text_result("logged")


DEMO_TOOLS: tuple[Tool[Any], ...] = (
    Tool("echo", "Returns the text it was given.", EchoArgs, echo),
    Tool("slow", "Sleeps `seconds` in `steps`, reporting progress after each.", SlowArgs, slow),
    Tool("ask", "Asks the user for their name (elicitation).", AskArgs, ask),
    Tool("sample", "Asks the client's model to answer `prompt` (sampling).", SampleArgs, sample),
    Tool("fail", "Returns an isError result.", NoArgs, fail),
    Tool("error", "Answers with a JSON-RPC error.", NoArgs, error),
    Tool("roots", "Lists the client's root URIs, one per line.", NoArgs, roots),
    Tool("log", "Sends `message` as an info log notification.", LogArgs, log),
)
