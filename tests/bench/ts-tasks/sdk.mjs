// What the TypeScript SDK servers of the tests share: loading the SDK installed beside this file
// (by .ci/ts-tasks.sh, into TS_TASKS_DIR, default <repo>/.cache/ts-tasks) from a script that
// does not live under it, and the one argument each takes. Used by tests/bench/ts-tasks/server.mjs
// and tests/integrity/upstream_ts.mjs.
import { readFile } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

export const HOST = "127.0.0.1";
export const SDK = "@modelcontextprotocol/sdk";

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

/** `import(pkg + subpath)` resolved in modulesDir, which is not an ancestor of the scripts. */
export async function load(pkg, subpath) {
  const root = join(modulesDir, "node_modules", pkg);
  const manifest = JSON.parse(await readFile(join(root, "package.json"), "utf8"));
  return import(pathToFileURL(join(root, exportTarget(manifest.exports, subpath))).href);
}

/** The PORT a script was given as its one argument; a usage line and exit 2 otherwise. */
export function portArgument() {
  const port = Number(process.argv[2]);
  if (process.argv.length !== 3 || !Number.isInteger(port) || port < 1 || port > 65535) {
    console.error(`usage: node ${basename(process.argv[1])} PORT   (PORT: 1..65535)`);
    process.exit(2);
  }
  return port;
}
