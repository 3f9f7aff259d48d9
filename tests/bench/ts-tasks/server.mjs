// The task benchmark's second reference: a server that offers 2025-11-25 tasks itself, in
// memory, built on the TypeScript SDK 1.32.2 (npm @modelcontextprotocol/sdk, pinned by
// package-lock.json beside this file and installed by .ci/ts-tasks.sh).
//
// The SDK's own task runtime (its InMemoryTaskStore and InMemoryTaskMessageQueue, given to
// McpServer, with the tool registered by `server.experimental.tasks.registerToolTask`) behind
// its Streamable HTTP transport with sessions, set up as the SDK's simpleStreamableHttp example
// does: one McpServer and transport per session, one task store shared by all. The one tool is
// tests/bench/native_tasks.py's `echo`: a task-augmented call creates a task (`working`) that
// completes with the text it was given; tasks/get and tasks/result are the SDK's. Nothing is
// durable and nothing is relayed. tests/bench/tasks.py starts it as a subprocess:
//
//   node tests/bench/ts-tasks/server.mjs PORT
//
// The packages are loaded from TS_TASKS_DIR (default: <repo>/.cache/ts-tasks).
import { randomUUID } from "node:crypto";
import { HOST, SDK, load, portArgument } from "./sdk.mjs";

const port = portArgument();

const { McpServer } = await load(SDK, "./server/mcp.js");
const { StreamableHTTPServerTransport } = await load(SDK, "./server/streamableHttp.js");
const { createMcpExpressApp } = await load(SDK, "./server/express.js");
const { isInitializeRequest } = await load(SDK, "./types.js");
const { InMemoryTaskStore, InMemoryTaskMessageQueue } = await load(SDK, "./experimental/tasks");
const z = await load("zod", "./v4");

const taskStore = new InMemoryTaskStore();

function sessionServer() {
  const server = new McpServer(
    { name: "ts-tasks", version: "1.32.2" },
    {
      capabilities: { tasks: { requests: { tools: { call: {} } }, list: {}, cancel: {} } },
      taskStore,
      taskMessageQueue: new InMemoryTaskMessageQueue(),
    },
  );
  server.experimental.tasks.registerToolTask(
    "echo",
    {
      description: "Returns the text it was given.",
      inputSchema: { text: z.string().optional() },
      execution: { taskSupport: "optional" },
    },
    {
      async createTask({ text }, { taskStore: scoped, taskRequestedTtl }) {
        const task = await scoped.createTask({ ttl: taskRequestedTtl });
        const result = { content: [{ type: "text", text: text ?? "" }] };
        // The work runs after the answer, as the Python reference's run_task does; the
        // answer carries a copy, because the store changes its own object in place.
        setImmediate(() => {
          taskStore.storeTaskResult(task.taskId, "completed", result).catch((err) => {
            console.error(`echo task ${task.taskId}: ${err}`);
          });
        });
        return { task: { ...task } };
      },
      async getTask(_args, { taskId, taskStore: scoped }) {
        return scoped.getTask(taskId);
      },
      async getTaskResult(_args, { taskId, taskStore: scoped }) {
        return scoped.getTaskResult(taskId);
      },
    },
  );
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
  if (!isInitializeRequest(req.body)) {
    return jsonRpcError(res, 400, -32000, "Bad Request: No valid session ID provided");
  }
  // JSON answers, as the gateway and the Python reference give.
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: true,
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
  console.log(`ts-tasks (TypeScript SDK 1.32.2) listening on http://${HOST}:${port}/mcp`);
});
// Nothing to flush: the store is memory, so a stop is an exit.
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => process.exit(0));
