/**
 * Retries, Retry-After and the mapping of errors, against scripted answers (a stub fetch).
 *
 * The server's own answers are tested live in live.test.ts; here the answers a live server gives
 * only under a fault (503 with Retry-After, a proxy's page, no answer) are scripted.
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  HakiClient,
  HakiError,
  HttpStatusError,
  IncompleteExportError,
  InvalidInputError,
  InvalidResponseError,
  RetryPolicy,
  StatementTimeoutError,
  TransportError,
  UnauthenticatedError,
  UnavailableError,
  retryAfterMs,
  type HakiClientOptions,
} from "haki-context-client";

import { Script, coded, json, text, unavailable, type Answer } from "./support/stub.js";

const NO_WAIT = new RetryPolicy({ attempts: 4, baseDelayMs: 0, maxDelayMs: 0, maxTotalMs: 5000 });
const STATS = {
  stats: {
    contextCalls: 3,
    injectionRate: 1.0,
    emptyCalls: 0,
    noRelevantMemoryCalls: 0,
    degradedCalls: 0,
    avgFactsServed: 1.0,
    avgUsedTokens: 12.0,
    latencyP50Ms: 5.0,
    latencyP95Ms: 9.0,
    activeFacts: 1,
    events: 2,
    openConflicts: 0,
    oldestOpenConflictSeconds: null,
    reasonCodes: [{ reasonCode: "TOP_SCORE", count: 3 }],
  },
};

function client(script: Script, options: HakiClientOptions = {}): HakiClient {
  return new HakiClient("http://haki.test", { apiKey: "hk_test", retry: NO_WAIT, fetch: script.fetch, ...options });
}

/** The error `promise` rejects with, checked to be an instance of `cls`. */
async function rejection<T extends Error>(promise: Promise<unknown>, cls: new (...args: never[]) => T): Promise<T> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof cls, `expected a ${cls.name}, got ${String(error)}`);
    return error;
  }
  assert.fail(`expected a ${cls.name}, got an answer`);
}

/** Every item of an async iterable (Array.fromAsync is Node.js 22's). */
async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = [];
  for await (const item of items) all.push(item);
  return all;
}

describe("retries on UNAVAILABLE", () => {
  test("unavailable twice then an answer is retried until it succeeds, sending the same request", async () => {
    const script = new Script(unavailable(), unavailable(), json({ data: STATS }));
    const stats = await client(script).stats();
    assert.equal(stats.contextCalls, 3);
    assert.equal(stats.reasonCodes[0]?.count, 3);
    assert.equal(script.requests.length, 3);
    for (const request of script.requests) assert.deepEqual(request.body, script.requests[0]?.body);
  });

  test("a 503 without a GraphQL body is UNAVAILABLE and retried", async () => {
    const script = new Script(text("upstream down", 503), json({ data: STATS }));
    assert.equal((await client(script).stats()).events, 2);
    assert.equal(script.requests.length, 2);
  });

  test("UNAVAILABLE beside a field that answered is not retried", async () => {
    // The document's first mutation was written; its second met a concurrent write and was
    // rolled back. Sending the document again would write the first one twice.
    const body = {
      data: { a: { id: "e1" }, b: null },
      errors: [{ message: "rolled back; retry it", path: ["b"], extensions: { code: "UNAVAILABLE" } }],
    };
    const script = new Script(json(body), json({ data: { a: { id: "e2" }, b: null } }));
    const error = await rejection(
      client(script).execute("mutation { a: recordEvent(input: {}) { id } b: recordEvent(input: {}) { id } }"),
      UnavailableError,
    );
    assert.equal(script.requests.length, 1);
    assert.deepEqual(error.data, { a: { id: "e1" }, b: null });
    assert.deepEqual(error.path, ["b"]);
  });

  test("UNAVAILABLE is thrown once the tries are spent, with its status and Retry-After", async () => {
    const script = new Script(unavailable("0"));
    const retry = new RetryPolicy({ attempts: 3, baseDelayMs: 0, maxTotalMs: 5000 });
    const error = await rejection(client(script, { retry }).stats(), UnavailableError);
    assert.equal(script.requests.length, 3);
    assert.equal(error.code, "UNAVAILABLE");
    assert.equal(error.statusCode, 503);
    assert.equal(error.retryAfterMs, 0);
  });

  test("the wait before a retry is never shorter than Retry-After in seconds", async () => {
    const script = new Script(unavailable("1"), json({ data: STATS }));
    const started = performance.now();
    await client(script).stats();
    const waited = performance.now() - started;
    assert.equal(script.requests.length, 2);
    assert.ok(waited >= 990, `waited ${waited} ms, Retry-After said 1 s`);
  });

  test("Retry-After as an HTTP date is honoured too", async () => {
    const inOneSecond = new Date(Math.ceil((Date.now() + 1500) / 1000) * 1000).toUTCString();
    const script = new Script(unavailable(inOneSecond), json({ data: STATS }));
    const started = performance.now();
    await client(script).stats();
    assert.equal(script.requests.length, 2);
    assert.ok(performance.now() - started >= 400, "the date was not waited for");
  });

  test("a Retry-After beyond the total time is not waited for", async () => {
    const script = new Script(unavailable("120"));
    const retry = new RetryPolicy({ attempts: 5, maxTotalMs: 30000 });
    const error = await rejection(client(script, { retry }).stats(), UnavailableError);
    assert.equal(script.requests.length, 1);
    assert.equal(error.retryAfterMs, 120000);
  });

  test("RetryPolicy({ attempts: 1 }) turns retries off", async () => {
    const script = new Script(unavailable(), json({ data: STATS }));
    await rejection(client(script, { retry: { attempts: 1 } }).stats(), UnavailableError);
    assert.equal(script.requests.length, 1);
  });

  test("the backoff grows, is bounded and is never shorter than Retry-After", () => {
    const policy = new RetryPolicy({ attempts: 6, baseDelayMs: 1000, maxDelayMs: 4000, maxTotalMs: 100000 });
    for (const [failed, ceiling] of [[1, 1000], [2, 2000], [3, 4000], [4, 4000]] as const) {
      for (const random of [0, 0.5, 0.999]) {
        const wait = policy.delay(failed, null, 0, () => random);
        assert.ok(wait !== null && wait >= ceiling / 2 && wait <= ceiling, `retry ${failed}: ${wait}`);
      }
    }
    assert.equal(policy.delay(1, 7000, 0), 7000);
    assert.equal(policy.delay(6, null, 0), null, "no try left in count");
    assert.equal(policy.delay(1, 7000, 95000), null, "no time left");
  });

  test("a retry policy without tries or with a negative delay is refused", () => {
    assert.throws(() => new RetryPolicy({ attempts: 0 }), RangeError);
    assert.throws(() => new RetryPolicy({ baseDelayMs: -1 }), RangeError);
  });

  test("retryAfterMs reads seconds and HTTP dates", () => {
    const now = Date.UTC(2026, 7, 1, 10, 0, 0);
    assert.equal(retryAfterMs("3"), 3000);
    assert.equal(retryAfterMs(" 0 "), 0);
    assert.equal(retryAfterMs(new Date(now + 5000).toUTCString(), now), 5000);
    assert.equal(retryAfterMs(new Date(now - 5000).toUTCString(), now), 0);
    assert.equal(retryAfterMs("soon"), null);
    assert.equal(retryAfterMs("-1"), null);
    assert.equal(retryAfterMs("1.5"), null);
    assert.equal(retryAfterMs(null), null);
  });
});

describe("errors", () => {
  const failures: Array<[string, Answer, new (...args: never[]) => HakiError]> = [
    ["INVALID_INPUT", coded("INVALID_INPUT"), InvalidInputError],
    ["TIMEOUT", coded("TIMEOUT"), StatementTimeoutError],
    ["UNAUTHENTICATED (401)", coded("UNAUTHENTICATED", 401), UnauthenticatedError],
    ["a proxy's 502 page", text("<html>bad gateway</html>", 502), HttpStatusError],
    ["a 200 that is not JSON", text("not json"), InvalidResponseError],
    ["a 200 without data", json({ extensions: {} }), InvalidResponseError],
  ];
  for (const [name, answer, cls] of failures) {
    test(`${name} is thrown at once, without a retry`, async () => {
      const script = new Script(answer, json({ data: STATS }));
      await rejection(client(script).stats(), cls);
      assert.equal(script.requests.length, 1);
    });
  }

  test("the error carries the code, message, path, extensions and every error of the response", async () => {
    const errors = [
      { message: "budget must be positive", path: ["context"], extensions: { code: "INVALID_INPUT", field: "budget" } },
      { message: "second", extensions: { code: "NOT_FOUND" } },
    ];
    const error = await rejection(client(new Script(json({ data: null, errors }))).stats(), InvalidInputError);
    assert.ok(error instanceof HakiError && error instanceof Error);
    assert.equal(error.code, "INVALID_INPUT");
    assert.equal(error.message, "budget must be positive");
    assert.deepEqual(error.path, ["context"]);
    assert.deepEqual(error.extensions, { code: "INVALID_INPUT", field: "budget" });
    assert.deepEqual(error.errors, errors);
    assert.equal(error.statusCode, 200);
    assert.equal(error.name, "InvalidInputError");
    assert.equal(String(error), "INVALID_INPUT: budget must be positive");
  });

  test("an unknown code is a plain HakiError with that code", async () => {
    const error = await rejection(client(new Script(coded("SOMETHING_NEW"))).stats(), HakiError);
    assert.equal(error.constructor, HakiError);
    assert.equal(error.code, "SOMETHING_NEW");
  });

  test("an error without a code is INTERNAL on a 200 and HTTP_ERROR on a 4xx", async () => {
    const bare = (status: number) => json({ errors: [{ message: "no code" }] }, status);
    assert.equal((await rejection(client(new Script(bare(200))).stats(), HakiError)).code, "INTERNAL");
    assert.equal((await rejection(client(new Script(bare(400))).stats(), HakiError)).code, "HTTP_ERROR");
  });

  test("no answer is a TransportError with the fetch error as its cause, and is not retried", async () => {
    const refused = new TypeError("fetch failed");
    const script = new Script(refused);
    const error = await rejection(client(script).stats(), TransportError);
    assert.equal(error.code, "TRANSPORT_ERROR");
    assert.equal(error.cause, refused);
    assert.equal(script.requests.length, 1);
  });

  test("an answer slower than the timeout is a TransportError", async () => {
    // A fetch that never answers; its timer stands for the open socket that keeps Node.js
    // running (AbortSignal.timeout's own timer does not).
    const never = (_input: string, init: RequestInit) =>
      new Promise<Response>((_resolve, reject) => {
        const socket = setTimeout(() => reject(new Error("the client's timeout never fired")), 5000);
        init.signal?.addEventListener("abort", () => {
          clearTimeout(socket);
          reject(init.signal?.reason);
        });
      });
    const haki = new HakiClient("http://haki.test", { timeoutMs: 50, fetch: never });
    const error = await rejection(haki.stats(), TransportError);
    assert.match(error.message, /TimeoutError/);
  });
});

describe("requests", () => {
  test("the key goes in a Bearer header and options left out are not sent", async () => {
    const script = new Script(json({ data: STATS }));
    await client(script, { apiKey: "hk_abc" }).stats();
    const [request] = script.requests;
    assert.ok(request !== undefined);
    assert.equal(request.method, "POST");
    assert.equal(request.headers.get("authorization"), "Bearer hk_abc");
    assert.equal(request.url.pathname, "/graphql");
    assert.match(request.headers.get("accept") ?? "", /application\/graphql-response\+json/);
    assert.equal(request.headers.get("content-type"), "application/json");
    assert.equal(request.body?.["operationName"], "Stats");
    assert.deepEqual(request.body?.["variables"], {});
    assert.match(String(request.body?.["query"]), /^\s*query Stats\b/);
  });

  test("without a key no Authorization header is sent; extra headers are", async () => {
    const script = new Script(json({ data: STATS }));
    const haki = new HakiClient("http://haki.test", { fetch: script.fetch, headers: { "X-Trace": "t1" } });
    await haki.stats();
    assert.equal(script.requests[0]?.headers.get("authorization"), null);
    assert.equal(script.requests[0]?.headers.get("x-trace"), "t1");
  });

  test("a base URL given with its /graphql path is accepted", async () => {
    const script = new Script(json({ data: STATS }));
    const haki = new HakiClient("http://haki.test/graphql/", { fetch: script.fetch });
    await haki.stats();
    assert.equal(haki.baseUrl, "http://haki.test");
    assert.equal(script.requests[0]?.url.href, "http://haki.test/graphql");
  });

  test("dates are sent as ISO 8601 and a fact's options by their GraphQL names", async () => {
    const assertion = { assertFact: { outcome: "CREATED", fact: null, superseded: [], conflict: null } };
    const script = new Script(json({ data: assertion }));
    await client(script).assertFact("s", "p", { any: "json" }, {
      confidence: 0.5,
      validFrom: new Date(Date.UTC(2026, 0, 2, 3, 4, 5)),
      mode: "CONTEST",
    });
    assert.deepEqual(script.requests[0]?.body?.["variables"], {
      input: { subjectId: "s", predicate: "p", value: { any: "json" }, confidence: 0.5, validFrom: "2026-01-02T03:04:05.000Z", mode: "CONTEST" },
    });
  });
});

describe("export", () => {
  const HEADER = { format: "haki-context/subject", version: 1, subjectId: "s", exportedAt: "2026-08-01T10:00:00+00:00" };
  const EVENT = { type: "event", id: "e1", kind: "note", payload: {} };
  const ndjson = (...records: object[]) =>
    text(records.map((record) => `${JSON.stringify(record)}\n`).join(""), 200, { "Content-Type": "application/x-ndjson" });

  test("an export cut before its end line throws after the lines it got", async () => {
    const got: object[] = [];
    const error = await rejection(
      (async () => {
        for await (const line of client(new Script(ndjson(HEADER, EVENT))).exportSubject("s")) got.push(line);
      })(),
      IncompleteExportError,
    );
    assert.deepEqual(got, [HEADER, EVENT]);
    assert.equal(error.code, "INCOMPLETE_EXPORT");
  });

  test("an export whose end line miscounts is incomplete", async () => {
    const end = { type: "end", events: 2, facts: 0, conflicts: 0 };
    await rejection(collect(client(new Script(ndjson(HEADER, EVENT, end))).exportSubject("s")), IncompleteExportError);
  });

  test("an export refused as UNAVAILABLE is retried before any line", async () => {
    const end = { type: "end", events: 1, facts: 0, conflicts: 0 };
    const script = new Script(unavailable(), ndjson(HEADER, EVENT, end));
    const lines = [];
    for await (const line of client(script).exportSubject("s")) lines.push(line);
    assert.deepEqual(lines, [HEADER, EVENT, end]);
    assert.deepEqual(
      script.requests.map((request) => [request.method, request.url.pathname, request.url.searchParams.get("subjectId")]),
      [
        ["GET", "/export", "s"],
        ["GET", "/export", "s"],
      ],
    );
    assert.equal(script.requests[0]?.headers.get("accept"), "application/x-ndjson");
  });

  test("an export refused for its key throws the server's code", async () => {
    await rejection(collect(client(new Script(coded("UNAUTHENTICATED", 401))).exportSubject("s")), UnauthenticatedError);
  });
});
