/**
 * A live `haki-context serve` for the tests, as a user runs it: a subprocess on a free loopback
 * port with its own temporary data directory (its own embedded PostgreSQL), development mode on
 * (a request without a key uses the project `default`) and the hashing embedder. Keys are made
 * with `haki-context keys create` on the same data directory while it runs.
 *
 * The executable is HAKI_CONTEXT_BIN, else `haki-context` on PATH; without it the live tests
 * skip, saying so (`findServer`).
 */

import { execFile, spawn, type ChildProcess } from "node:child_process";
import { accessSync, constants, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const START_TIMEOUT_MS = 120_000;
const KEY_LINE = /^hk_[A-Za-z0-9_-]+$/;

export interface LiveServer {
  url: string;
  /** A key of project `client-tests` (read and write). */
  key: string;
  /** A key of project `client-tests-other`. */
  otherKey: string;
  /** A key of project `client-tests` that may also erase. */
  eraserKey: string;
  /** A read-only key of project `client-tests`. */
  readerKey: string;
  /** Ends the server (SIGTERM), its database, and removes its data directory. */
  close(): Promise<void>;
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** The server's executable, or the sentence that says why the live tests skip. One named by
 * HAKI_CONTEXT_BIN that is no executable is an error, not a skip: it was asked for. */
export function findServer(): { bin: string } | { skip: string } {
  const named = process.env["HAKI_CONTEXT_BIN"];
  if (named) {
    if (!executable(named)) throw new Error(`HAKI_CONTEXT_BIN names ${named}, which is not an executable file`);
    return { bin: named };
  }
  for (const dir of (process.env["PATH"] ?? "").split(delimiter)) {
    if (dir && executable(join(dir, "haki-context"))) return { bin: join(dir, "haki-context") };
  }
  return {
    skip: "the `haki-context` executable was not found: set HAKI_CONTEXT_BIN to it (e.g. .venv/bin/haki-context) or put it on PATH",
  };
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function serverEnv(dataDir: string, port: number): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith("HAKI_")));
  return {
    ...env,
    HAKI_DATA_DIR: dataDir,
    HAKI_HOST: "127.0.0.1",
    HAKI_PORT: String(port),
    HAKI_DEV_MODE: "1",
    HAKI_EMBED_PROVIDER: "hashing",
    HAKI_SCOPE_INDEX_INTERVAL_S: "0",
    HAKI_GRAPHIQL: "0",
  };
}

async function createKey(bin: string, env: NodeJS.ProcessEnv, project: string, ...scopes: string[]): Promise<string> {
  const args = ["keys", "create", "--project", project, ...scopes.flatMap((scope) => ["--scope", scope])];
  const { stdout } = await run(bin, args, { env, timeout: 120_000 });
  const last = stdout.trim().split("\n").pop() ?? "";
  if (!KEY_LINE.test(last)) throw new Error(`\`keys create\` printed no key: ${stdout}`);
  return last;
}

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once("exit", () => resolve());
  });
}

/** Shut down the embedded PostgreSQL if the server was killed before it could (fast shutdown). */
function shutDownOrphanDatabase(dataDir: string): void {
  try {
    const pid = Number(readFileSync(join(dataDir, "pg", "postmaster.pid"), "utf8").split("\n")[0]);
    if (Number.isInteger(pid) && pid > 0) process.kill(pid, "SIGINT");
  } catch {
    // no database left running
  }
}

/** `haki-context serve` on 127.0.0.1, ready (GET /readyz is 200), with its keys. */
export async function startServer(bin: string): Promise<LiveServer> {
  const dataDir = mkdtempSync(join(tmpdir(), "haki-ts-client-tests-"));
  const port = await freePort();
  const env = serverEnv(dataDir, port);
  const url = `http://127.0.0.1:${port}`;
  let log = "";
  const child = spawn(bin, ["serve", "--host", "127.0.0.1", "--port", String(port)], { env, stdio: ["ignore", "pipe", "pipe"] });
  const keep = (chunk: Buffer) => {
    log = (log + chunk.toString()).slice(-8000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);

  const close = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const killed = setTimeout(() => child.kill("SIGKILL"), 30_000);
      await exited(child);
      clearTimeout(killed);
    }
    shutDownOrphanDatabase(dataDir);
    rmSync(dataDir, { recursive: true, force: true });
  };

  try {
    const deadline = Date.now() + START_TIMEOUT_MS;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`the server exited with ${child.exitCode}:\n${log}`);
      if (Date.now() > deadline) throw new Error(`the server was not ready within ${START_TIMEOUT_MS / 1000} s:\n${log}`);
      try {
        if ((await fetch(`${url}/readyz`, { signal: AbortSignal.timeout(2000) })).status === 200) break;
      } catch {
        // not listening yet
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    return {
      url,
      key: await createKey(bin, env, "client-tests"),
      otherKey: await createKey(bin, env, "client-tests-other"),
      eraserKey: await createKey(bin, env, "client-tests", "read", "write", "erase"),
      readerKey: await createKey(bin, env, "client-tests", "read"),
      close,
    };
  } catch (error) {
    await close();
    throw error;
  }
}
