// The integrity harness's TypeScript upstream: the harness's six tools on the TypeScript SDK
// 1.32.2 (npm @modelcontextprotocol/sdk, installed by .ci/ts-tasks.sh into .cache/ts-tasks),
// served over its Streamable HTTP transport with sessions, as the SDK's examples set it up: one
// transport and one server per session, answers on an SSE stream per POST (the defaults).
//
//   node tests/integrity/upstream_ts.mjs PORT        (env INTEGRITY_RUNS: the runs file)
//
// The tools are the SDK's low-level `Server` handlers for tools/list and tools/call (the class
// `McpServer` wraps): `McpServer` turns every error a tool throws, McpError included, into an
// isError result, and `error` must answer with a JSON-RPC error. Every run appends JSON lines
// to INTEGRITY_RUNS (`start`, then `end` or `cancelled`, with the JSON-RPC id and the session
// the call came in, and `upstream: "ts-http"`, the harness's name for it), one write each on an O_APPEND descriptor, as upstream_py.py does. The
// packages are loaded from TS_TASKS_DIR (default: <repo>/.cache/ts-tasks).
import { randomUUID } from "node:crypto";
import { openSync, writeSync } from "node:fs";
import { HOST, SDK, load, portArgument } from "../bench/ts-tasks/sdk.mjs";

const ERROR_CODE = -32050;

const port = portArgument();

const { Server } = await load(SDK, "./server/index.js");
const { StreamableHTTPServerTransport } = await load(SDK, "./server/streamableHttp.js");
const { createMcpExpressApp } = await load(SDK, "./server/express.js");
const types = await load(SDK, "./types.js");
const { CallToolRequestSchema, ElicitResultSchema, ListToolsRequestSchema, McpError } = types;

const runs = openSync(process.env.INTEGRITY_RUNS, "a");

function note(extra, nonce, tool, event) {
  const line = { nonce, upstream: "ts-http", tool, event, pid: process.pid, t: Date.now() / 1000 };
  Object.assign(line, { session: extra.sessionId, id: extra.requestId });
  writeSync(runs, `${JSON.stringify(line)}\n`);
}

function schema(extra = {}) {
  const properties = { nonce: { type: "string" } };
  for (const name of Object.keys(extra)) properties[name] = { type: "integer" };
  return { type: "object", properties, required: Object.keys(properties) };
}

const TOOLS = [
  { name: "instant", description: "Answers at once.", inputSchema: schema() },
  { name: "slow", description: "Progress, then an answer.", inputSchema: schema({ ms: 0, steps: 0 }) },
  { name: "ask", description: "Asks first, then answers with it.", inputSchema: schema() },
  { name: "fail", description: "A tool error (isError).", inputSchema: schema() },
  { name: "error", description: "A JSON-RPC error.", inputSchema: schema() },
  { name: "hang", description: "Sleeps ms milliseconds.", inputSchema: schema({ ms: 0 }) },
];

const ANSWER_SCHEMA = {
  type: "object",
  properties: { answer: { type: "string", description: "Any text" } },
  required: ["answer"],
};

/** Resolves after `ms`, or rejects when `signal` aborts (a notifications/cancelled). */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(new Error("cancelled"));
    });
  });
}

function text(value, isError = false) {
  const result = { content: [{ type: "text", text: value }] };
  if (isError) result.isError = true;
  return result;
}

/** Runs `work` between a `start` and an `end` (or `cancelled`) line. */
async function ran(nonce, tool, extra, work) {
  note(extra, nonce, tool, "start");
  try {
    const result = await work();
    note(extra, nonce, tool, "end");
    return result;
  } catch (err) {
    note(extra, nonce, tool, extra.signal.aborted ? "cancelled" : "end");
    throw err;
  }
}

async function callTool(request, extra) {
  const { name, arguments: args = {} } = request.params;
  const nonce = String(args.nonce);
  const { signal } = extra;
  switch (name) {
    case "instant":
      return ran(nonce, name, extra, async () => text(`instant:${nonce}`));
    case "slow":
      return ran(nonce, name, extra, async () => {
        const token = request.params._meta?.progressToken;
        for (let step = 1; step <= args.steps; step++) {
          await sleep(args.ms / args.steps, signal);
          if (token !== undefined) {
            const params = { progressToken: token, progress: step, total: args.steps };
            params.message = `step ${step}/${args.steps}`;
            await extra.sendNotification({ method: "notifications/progress", params });
          }
        }
        return text(`slow:${nonce}`);
      });
    case "ask":
      return ran(nonce, name, extra, async () => {
        const params = { mode: "form", message: `ask:${nonce}`, requestedSchema: ANSWER_SCHEMA };
        const reply = await extra.sendRequest(
          { method: "elicitation/create", params },
          ElicitResultSchema,
        );
        if (reply.action !== "accept") return text(`ask:${nonce}:(${reply.action})`);
        return text(`ask:${nonce}:${reply.content.answer}`);
      });
    case "fail":
      return ran(nonce, name, extra, async () => text(`fail:${nonce}`, true));
    case "error":
      return ran(nonce, name, extra, async () => {
        throw new McpError(ERROR_CODE, `error:${nonce}`);
      });
    case "hang":
      return ran(nonce, name, extra, async () => {
        await sleep(args.ms, signal);
        return text(`hang:${nonce}`);
      });
    default:
      throw new McpError(-32602, `Tool ${name} not found`);
  }
}

function sessionServer() {
  const server = new Server(
    { name: "integrity-ts", version: "1.32.2" },
    { capabilities: { tools: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
  server.setRequestHandler(CallToolRequestSchema, callTool);
  return server;
}

const transports = new Map();
const app = createMcpExpressApp({ host: HOST });

function jsonRpcError(res, status, code, message) {
  res.status(status).json({ jsonrpc: "2.0", error: { code, message }, id: null });
}

app.post("/mcp", async (req, res) => {
  const sessionId = req.headers["mcp-session-id"];
  const known = sessionId === undefined ? undefined : transports.get(sessionId);
  if (known !== undefined) return known.handleRequest(req, res, req.body);
  if (sessionId !== undefined) return jsonRpcError(res, 404, -32001, "Session not found");
  if (!types.isInitializeRequest(req.body)) {
    return jsonRpcError(res, 400, -32000, "Bad Request: No valid session ID provided");
  }
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    onsessioninitialized: (id) => transports.set(id, transport),
  });
  transport.onclose = () => transports.delete(transport.sessionId);
  await sessionServer().connect(transport);
  return transport.handleRequest(req, res, req.body);
});

// GET (a standalone stream) and DELETE (end the session) go to the session's transport.
async function sessionRequest(req, res) {
  const transport = transports.get(req.headers["mcp-session-id"]);
  if (transport === undefined) return jsonRpcError(res, 404, -32001, "Session not found");
  return transport.handleRequest(req, res);
}
app.get("/mcp", sessionRequest);
app.delete("/mcp", sessionRequest);

app.listen(port, HOST, (err) => {
  if (err) {
    console.error(`cannot listen on ${HOST}:${port}: ${err.message}`);
    process.exit(1);
  }
  console.log(`integrity-ts (TypeScript SDK 1.32.2) listening on http://${HOST}:${port}/mcp`);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
