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
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const HOST = "127.0.0.1";
const SDK = "@modelcontextprotocol/sdk";

const here = dirname(fileURLToPath(import.meta.url));
const modulesDir = process.env.TS_TASKS_DIR ?? join(here, "..", "..", "..", ".cache", "ts-tasks");

/** The `import` target of `subpath` in a package's `exports` (exact, or its "./*" pattern). */
function exportTarget(exports, subpath) {
  let entry = exports[subpath];
  if (entry === undefined && exports["./*"] !== undefined) {
    const pattern = exports["./*"];
    const target = typeof pattern === "string" ? pattern : pattern.import;
    entry = target.replace("*", subpath.slice(2));
  }
  if (entry === undefined) throw new Error(`no export ${subpath}`);
  return typeof entry === "string" ? entry : (entry.import?.default ?? entry.import);
}

/** `import(pkg + subpath)` resolved in modulesDir, which is not an ancestor of this file. */
async function load(pkg, subpath) {
  const root = join(modulesDir, "node_modules", pkg);
  const manifest = JSON.parse(await readFile(join(root, "package.json"), "utf8"));
  return import(pathToFileURL(join(root, exportTarget(manifest.exports, subpath))).href);
}

const port = Number(process.argv[2]);
if (process.argv.length !== 3 || !Number.isInteger(port) || port < 1 || port > 65535) {
  console.error("usage: node server.mjs PORT   (PORT: 1..65535)");
  process.exit(2);
}

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
