// The tasks-extension (SEP-2663) requester: @modelcontextprotocol/ext-tasks 0.2.2 over
// @modelcontextprotocol/client 2.4.0, pinned to 2026-07-28, against one MCP endpoint. Prints
// one JSON line of what happened; exits non-zero only on bad usage.
//
//   node client.mjs URL SCENARIO [TOOL] [ARGS_JSON]
//     call    call TOOL (a task or an immediate result, the server decides) and settle it
//     cancel  call TOOL, which must become a task, cancel it, then read the task until terminal
//
// The packages are loaded from EXT_TASKS_DIR (default: <repo>/.cache/ext-tasks, where
// .ci/ext-tasks.sh installs package-lock.json beside this file).
//
// A 2026-07-28 tasks server needs the package's `rawDispatch` and `v2RequestFraming`: the SDK
// client rejects `resultType: "task"`, so tools/call and tasks/* go through a request
// coordinator the host owns. Here that is `rawDispatch` below: one POST per request, its own
// ids, MCP-Protocol-Version and Mcp-Method from the body, Mcp-Name from the body for
// tools/call and from the package (the task id) for tasks/*. Every request either path sends
// is recorded in `wire`.
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const VERSION = "2026-07-28";
const CLIENT_INFO = { name: "ext-tasks-test", version: "0.2.2" };
const CAPABILITIES = { elicitation: { form: {} }, sampling: {}, roots: {} };
/** What the input handler answers, so a test can find it in the tool's result. */
const ANSWERS = {
  name: "ext-tasks",
  sampled: "sampled by ext-tasks",
  root: "file:///ext-tasks",
};
const SETTLE_MS = 30_000;
const NAME_FIELD = { "tools/call": "name", "prompts/get": "name", "resources/read": "uri" };

const here = dirname(fileURLToPath(import.meta.url));
const modulesDir = process.env.EXT_TASKS_DIR ?? join(here, "..", "..", "..", ".cache", "ext-tasks");

/** `import(pkg + subpath)` resolved in modulesDir through the package's `exports`. */
async function load(pkg, subpath) {
  const root = join(modulesDir, "node_modules", pkg);
  const manifest = JSON.parse(await readFile(join(root, "package.json"), "utf8"));
  let entry = manifest.exports[subpath];
  if (typeof entry !== "string") entry = entry.import?.default ?? entry.import;
  return import(pathToFileURL(join(root, entry)).href);
}

const { Client, StreamableHTTPClientTransport } = await load("@modelcontextprotocol/client", ".");
const tasks = await load("@modelcontextprotocol/ext-tasks", "./client");

const wire = [];

/** fetch, recording what is sent and what status and content type come back. */
async function recordedFetch(url, init = {}) {
  const headers = new Headers(init.headers);
  const entry = { via: "sdk", http: init.method ?? "GET", headers: Object.fromEntries(headers) };
  if (typeof init.body === "string") entry.body = JSON.parse(init.body);
  wire.push(entry);
  const response = await fetch(url, init);
  entry.status = response.status;
  entry.contentType = response.headers.get("content-type");
  return response;
}

function headerValue(value) {
  return /^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$/.test(value)
    ? value
    : `=?base64?${Buffer.from(value, "utf8").toString("base64")}?=`;
}

/** The first JSON-RPC message with `id` in an SSE body. */
async function fromEventStream(response, id) {
  const text = await response.text();
  for (const block of text.split(/\r?\n\r?\n/)) {
    const data = block
      .split(/\r?\n/)
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).replace(/^ /, ""))
      .join("\n");
    if (!data) continue;
    const message = JSON.parse(data);
    if (message.id === id) return message;
  }
  throw new tasks.DispatchError(`no response with id ${id} on the event stream`, false);
}

function makeRawDispatch(url) {
  let nextId = 1_000_000; // apart from the SDK client's own ids, which count from 0
  return async (request, options = {}) => {
    const id = nextId++;
    const body = { jsonrpc: "2.0", id, ...request };
    const headers = {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": request.params?._meta?.["io.modelcontextprotocol/protocolVersion"] ?? VERSION,
      "mcp-method": request.method,
    };
    const field = NAME_FIELD[request.method];
    if (field !== undefined && typeof request.params?.[field] === "string")
      headers["mcp-name"] = headerValue(request.params[field]);
    for (const [name, value] of Object.entries(options.context?.headers ?? {}))
      headers[name.toLowerCase()] = value;
    const entry = { via: "raw", http: "POST", headers, body, at: Date.now() };
    wire.push(entry);
    const timeout = options.context?.requestTimeoutMs;
    const signals = [options.signal, timeout === undefined ? undefined : AbortSignal.timeout(timeout)];
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.any(signals.filter((signal) => signal !== undefined)),
      });
    } catch (error) {
      if (options.signal?.aborted) throw error;
      throw new tasks.DispatchError("POST failed", true, { cause: error });
    }
    entry.status = response.status;
    const type = response.headers.get("content-type") ?? "";
    let message;
    if (type.startsWith("application/json")) message = await response.json();
    else if (type.startsWith("text/event-stream")) message = await fromEventStream(response, id);
    else throw new tasks.DispatchError(`HTTP ${response.status} (${type || "no body"})`, response.status >= 500);
    entry.answer = message.error ?? { resultType: message.result?.resultType };
    if (message.error !== undefined) return { kind: "error", error: message.error };
    if (message.result === undefined) throw new tasks.DispatchError("a response with neither result nor error");
    return { kind: "result", result: message.result };
  };
}

const inputs = [];

async function onInputRequest(request, context) {
  inputs.push({
    kind: request.kind,
    scope: context.scope,
    delivery: context.delivery,
    taskId: context.taskId,
    inputId: context.inputId,
    params: request.params,
  });
  if (request.kind === "elicitation") return { action: "accept", content: { name: ANSWERS.name } };
  if (request.kind === "sampling")
    return { model: "ext-tasks-test", role: "assistant", content: { type: "text", text: ANSWERS.sampled } };
  return { roots: [{ uri: ANSWERS.root, name: "ext-tasks" }] };
}

function describeError(error) {
  const out = { name: error?.name, message: String(error?.message ?? error) };
  for (const key of ["code", "data"]) if (error?.[key] !== undefined) out[key] = error[key];
  if (error?.cause !== undefined) out.cause = describeError(error.cause);
  return out;
}

function describeOutcome(outcome) {
  const out = { status: outcome.status };
  if (outcome.status === "completed") out.result = outcome.result;
  if (outcome.status === "failed") out.error = describeError(outcome.error);
  if (outcome.task !== undefined) out.task = outcome.task.raw;
  return out;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** tasks/get until the task is terminal (cancellation is eventually consistent). */
async function readUntilTerminal(session, taskId) {
  const controller = session.task(taskId);
  const deadline = Date.now() + SETTLE_MS;
  for (;;) {
    const view = await controller.snapshot();
    if (["completed", "failed", "cancelled"].includes(view.status) || Date.now() > deadline) return view.raw;
    await sleep(Math.max(50, view.suggestedPollIntervalMs ?? 200));
  }
}

async function run(url, scenario, tool, args) {
  const client = new Client(CLIENT_INFO, {
    capabilities: CAPABILITIES,
    versionNegotiation: { mode: { pin: VERSION } },
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: recordedFetch }));
  const out = {
    era: client.getProtocolEra(),
    protocolVersion: client.getNegotiatedProtocolVersion(),
    serverCapabilities: client.getServerCapabilities(),
  };
  const session = tasks.createTaskSessionFromClient(client, {
    endpointId: url,
    rawDispatch: makeRawDispatch(url),
    v2RequestFraming: { protocolVersion: VERSION, clientInfo: CLIENT_INFO, clientCapabilities: CAPABILITIES },
    onInputRequest,
    onError: (error) => (out.backgroundErrors ??= []).push(describeError(error)),
  });
  try {
    out.generation = session.capabilities;
    // Without the extension the call would run to its end synchronously: say so at once.
    if (scenario === "cancel" && !session.capabilities.execution)
      throw new Error("the server offers no tasks (server/discover lacks the extension)");
    const execution = await session.callTool(tool, args);
    out.kind = execution.kind;
    out.taskId = execution.handle?.taskId;
    const events = (out.events = []);
    if (scenario === "cancel") {
      if (execution.kind !== "task") throw new Error(`${tool} gave an immediate result, not a task`);
      await execution.cancel();
    }
    const settled = await execution.settle({
      signal: AbortSignal.timeout(SETTLE_MS),
      onEvent: (event) => {
        const task = tasks.taskViewFromExecutionEvent(event);
        events.push({ type: event.type, status: task?.status ?? event.outcome?.status, at: Date.now() });
      },
    });
    out.outcome = describeOutcome(settled.outcome);
    if (scenario === "cancel") out.afterCancel = await readUntilTerminal(session, out.taskId);
  } catch (error) {
    out.error = describeError(error);
  } finally {
    await session.close();
    await client.close();
  }
  out.inputs = inputs;
  out.wire = wire;
  return out;
}

const [url, scenario, tool, argsJson] = process.argv.slice(2);
if (!url || !["call", "cancel"].includes(scenario) || !tool) {
  console.error("usage: node client.mjs URL call|cancel TOOL [ARGS_JSON]");
  process.exit(2);
}
let output;
try {
  output = await run(url, scenario, tool, JSON.parse(argsJson ?? "{}"));
} catch (error) {
  output = { error: describeError(error), inputs, wire };
}
// Exit once the line is flushed (a pipe may take it in parts): open sockets would keep Node up.
process.stdout.write(`${JSON.stringify(output)}\n`, () => process.exit(0));
