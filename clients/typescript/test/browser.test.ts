/**
 * The built package in a browser: headless Chromium loads dist/index.js as an ES module from a
 * page and runs the client with the browser's own fetch against a stub GraphQL endpoint of the
 * same origin (a write whose consistency token is sent back, a 503 retried, an error's class).
 *
 * Chromium is CHROMIUM, else `chromium` or `chromium-browser` on PATH; without one this test
 * skips, saying so.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { accessSync, constants, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join, normalize } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { test } from "node:test";

const DIST = fileURLToPath(new URL("../../dist/", import.meta.url));

/** Chromium's executable, or null. One named by CHROMIUM that is no executable is an error, not a skip. */
function findChromium(): string | null {
  const named = process.env["CHROMIUM"];
  const candidates = named
    ? [named]
    : (process.env["PATH"] ?? "").split(delimiter).flatMap((dir) => [join(dir, "chromium"), join(dir, "chromium-browser")]);
  for (const path of candidates) {
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // not this one
    }
  }
  if (named) throw new Error(`CHROMIUM names ${named}, which is not an executable file`);
  return null;
}

const PAGE = `<!doctype html>
<meta charset="utf-8">
<pre id="result">pending</pre>
<script type="module">
  const show = (value) => { document.getElementById("result").textContent = JSON.stringify(value); };
  try {
    const { HakiClient, InvalidInputError } = await import("/dist/index.js");
    const haki = new HakiClient(location.origin, { apiKey: "hk_browser", retry: { attempts: 3, baseDelayMs: 0 } });
    const event = await haki.recordEvent("s", "note", { text: "hello" });
    const stats = await haki.stats();
    let error = null;
    try {
      await haki.context("s", "anything", { budget: 0 });
    } catch (caught) {
      error = { invalidInput: caught instanceof InvalidInputError, code: caught.code, path: caught.path };
    }
    show({ event: event.id, token: haki.consistencyToken, events: stats.events, error });
  } catch (caught) {
    show({ failed: String(caught), stack: caught.stack });
  }
</script>
`;

const EVENT = {
  id: "e1",
  subjectId: "s",
  kind: "note",
  payload: { text: "hello" },
  occurredAt: "2026-08-01T10:00:00+00:00",
  recordedAt: "2026-08-01T10:00:00+00:00",
  excerpt: "hello",
};

interface Seen {
  operationName: string;
  authorization: string | undefined;
  token: string | undefined;
}

const chromium = findChromium();

test(
  "the built package runs in headless Chromium with the browser's fetch",
  { skip: chromium === null ? "Chromium was not found: set CHROMIUM to it or put `chromium` on PATH" : false },
  async () => {
    const seen: Seen[] = [];
    let statsTries = 0;
    const answer = (response: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
      response.writeHead(status, { "Content-Type": "application/json", ...headers });
      response.end(JSON.stringify(body));
    };
    const server = createServer((request: IncomingMessage, response: ServerResponse) => {
      const url = new URL(request.url ?? "/", "http://localhost");
      if (request.method === "GET" && url.pathname === "/page.html") {
        response.writeHead(200, { "Content-Type": "text/html; charset=utf-8" });
        response.end(PAGE);
        return;
      }
      if (request.method === "GET" && url.pathname.startsWith("/dist/")) {
        const path = normalize(join(DIST, url.pathname.slice("/dist/".length)));
        if (!path.startsWith(DIST)) return void response.writeHead(403).end();
        try {
          const body = readFileSync(path);
          response.writeHead(200, { "Content-Type": "text/javascript; charset=utf-8" });
          response.end(body);
        } catch {
          response.writeHead(404).end();
        }
        return;
      }
      if (request.method === "POST" && url.pathname === "/graphql") {
        let text = "";
        request.on("data", (chunk: Buffer) => (text += chunk.toString()));
        request.on("end", () => {
          const { operationName } = JSON.parse(text) as { operationName: string };
          seen.push({
            operationName,
            authorization: request.headers["authorization"],
            token: request.headers["haki-consistency-token"] as string | undefined,
          });
          if (operationName === "RecordEvent") return answer(response, 200, { data: { recordEvent: EVENT } }, { "Haki-Consistency-Token": "0/16B3748" });
          if (operationName === "Stats" && (statsTries += 1) === 1) {
            return answer(response, 503, { errors: [{ message: "down", extensions: { code: "UNAVAILABLE" } }] }, { "Retry-After": "0" });
          }
          if (operationName === "Stats") return answer(response, 200, { data: { stats: { events: 1 } } });
          return answer(response, 200, {
            data: null,
            errors: [{ message: "budget must be positive", path: ["context"], extensions: { code: "INVALID_INPUT" } }],
          });
        });
        return;
      }
      response.writeHead(404).end();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const profile = mkdtempSync(join(tmpdir(), "haki-ts-client-chromium-"));
    try {
      const { stdout } = await promisify(execFile)(
        chromium as string,
        [
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--no-first-run",
          `--user-data-dir=${profile}`,
          "--virtual-time-budget=15000",
          "--dump-dom",
          `${origin}/page.html`,
        ],
        { timeout: 90_000 },
      );
      const shown = /<pre id="result">([^<]*)<\/pre>/.exec(stdout)?.[1];
      assert.ok(shown !== undefined, `no result in the page:\n${stdout}`);
      const result = JSON.parse(shown.replaceAll("&quot;", '"').replaceAll("&amp;", "&")) as Record<string, unknown>;
      assert.deepEqual(result, {
        event: "e1",
        token: "0/16B3748",
        events: 1,
        error: { invalidInput: true, code: "INVALID_INPUT", path: ["context"] },
      });
      assert.deepEqual(seen, [
        { operationName: "RecordEvent", authorization: "Bearer hk_browser", token: undefined },
        { operationName: "Stats", authorization: "Bearer hk_browser", token: "0/16B3748" },
        { operationName: "Stats", authorization: "Bearer hk_browser", token: "0/16B3748" },
        { operationName: "Context", authorization: "Bearer hk_browser", token: "0/16B3748" },
      ]);
    } finally {
      server.close();
      rmSync(profile, { recursive: true, force: true });
    }
  },
);
