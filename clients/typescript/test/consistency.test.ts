/**
 * Read-your-writes: the client keeps its mutations' consistency token and sends it back.
 *
 * The server is a stub fetch: each answer may carry a token in the `Haki-Consistency-Token`
 * header or in `extensions.consistencyToken`, as a server with read replicas gives one after a
 * write. The cases are the Python client's (clients/python/tests/test_consistency.py).
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  HakiClient,
  RetryPolicy,
  UnavailableError,
  documentOperations,
  isMutation,
  tokenPosition,
  type HakiClientOptions,
} from "haki-context-client";

import { Script, json, text } from "./support/stub.js";

const HEADER = "Haki-Consistency-Token";
const NO_WAIT = new RetryPolicy({ attempts: 4, baseDelayMs: 0, maxDelayMs: 0, maxTotalMs: 5000 });
const EVENT = {
  id: "e1",
  subjectId: "s",
  kind: "note",
  payload: {},
  occurredAt: "2026-08-01T10:00:00+00:00",
  recordedAt: "2026-08-01T10:00:00+00:00",
  excerpt: "",
};
const PACKET = {
  context: {
    traceId: "t1",
    rendered: "",
    status: "OK",
    emptyReason: null,
    warnings: [],
    budgetTokens: 900,
    usedTokens: 0,
    facts: [],
    episodes: [],
  },
};
const EVENTS_PAGE = { events: { edges: [], pageInfo: { hasNextPage: false, endCursor: null } } };

/** A GraphQL answer, with a token in its header and/or its extensions. */
function answer(data: unknown, token: { header?: string; extension?: unknown } = {}): () => Response {
  const body: Record<string, unknown> = { data };
  if (token.extension !== undefined) body["extensions"] = { consistencyToken: token.extension };
  return json(body, 200, token.header === undefined ? {} : { [HEADER]: token.header });
}

const recorded = (token: { header?: string; extension?: unknown } = {}) => answer({ recordEvent: EVENT }, token);
const packet = (header?: string) => answer(PACKET, header === undefined ? {} : { header });
const eventsPage = () => answer(EVENTS_PAGE);

function client(script: Script, options: HakiClientOptions = {}): HakiClient {
  return new HakiClient("http://haki.test", { retry: NO_WAIT, fetch: script.fetch, ...options });
}

async function record(haki: HakiClient): Promise<void> {
  await haki.recordEvent("s", "note", {});
}

describe("the consistency token", () => {
  test("no token is sent before any write", async () => {
    const script = new Script(eventsPage());
    const haki = client(script);
    await haki.events("s");
    await haki.events("s");
    assert.equal(haki.consistencyToken, null);
    assert.deepEqual(script.sent(), [null, null]);
  });

  test("a mutation response's token in the header is adopted and sent on the next query", async () => {
    const script = new Script(recorded({ header: "0/16B3748" }), eventsPage());
    const haki = client(script);
    await record(haki);
    assert.equal(haki.consistencyToken, "0/16B3748");
    await haki.events("s");
    assert.deepEqual(script.sent(), [null, "0/16B3748"]);
  });

  test("a mutation response's token in the extensions is adopted and sent on the next query", async () => {
    const script = new Script(recorded({ extension: "0/16B3748" }), eventsPage());
    const haki = client(script);
    await record(haki);
    assert.equal(haki.consistencyToken, "0/16B3748");
    await haki.events("s");
    assert.deepEqual(script.sent(), [null, "0/16B3748"]);
  });

  test("the header's token is read before the extensions' one", async () => {
    const haki = client(new Script(recorded({ header: "0/20", extension: "0/30" })));
    await record(haki);
    assert.equal(haki.consistencyToken, "0/20");
  });

  test("the token is sent on the next mutation too", async () => {
    const script = new Script(recorded({ header: "0/20" }), recorded({ header: "0/30" }));
    const haki = client(script);
    await record(haki);
    await record(haki);
    assert.equal(haki.consistencyToken, "0/30");
    assert.deepEqual(script.sent(), [null, "0/20"]);
  });

  test("the highest of two tokens is kept, compared as log positions", async () => {
    // 0/100 is past 0/FF although it sorts before it as text; 1/0 is past 0/FFFFFFFF.
    let script = new Script(recorded({ header: "0/100" }), recorded({ header: "0/FF" }), eventsPage());
    let haki = client(script);
    await record(haki);
    await record(haki);
    assert.equal(haki.consistencyToken, "0/100");
    await haki.events("s");
    assert.deepEqual(script.sent(), [null, "0/100", "0/100"]);
    script = new Script(recorded({ header: "0/FFFFFFFF" }), recorded({ header: "1/0" }), recorded({ header: "0/FFFFFFFF" }));
    haki = client(script);
    for (let i = 0; i < 3; i += 1) await record(haki);
    assert.equal(haki.consistencyToken, "1/0");
  });

  test("a query response's token is not adopted", async () => {
    // A context call writes its trace: adopting its token would make the next context call wait
    // for that trace to reach a replica.
    const script = new Script(packet("0/16B3748"), packet("0/16B3800"));
    const haki = client(script);
    await haki.context("s", "anything");
    await haki.context("s", "anything");
    assert.equal(haki.consistencyToken, null);
    assert.deepEqual(script.sent(), [null, null]);
  });

  test("with adoptQueryTokens a query response's token is adopted", async () => {
    const script = new Script(packet("0/40"), eventsPage());
    const haki = client(script, { adoptQueryTokens: true });
    await haki.context("s", "anything");
    await haki.events("s");
    assert.equal(haki.consistencyToken, "0/40");
    assert.deepEqual(script.sent(), [null, "0/40"]);
  });

  for (const token of ["garbage", "", "0/", "/16B3748", "0/16B3748/1", "123456789/0", "0x0/10", "0/G", " ", "-1/0"]) {
    test(`a malformed token (${JSON.stringify(token)}) is ignored`, async () => {
      const script = new Script(recorded({ header: token }), recorded({ extension: token }), eventsPage());
      const haki = client(script);
      await record(haki);
      await record(haki);
      await haki.events("s");
      assert.equal(haki.consistencyToken, null);
      assert.deepEqual(script.sent(), [null, null, null]);
    });
  }

  test("a token of another type in the extensions is ignored", async () => {
    const haki = client(new Script(recorded({ extension: 12345 }), recorded({ extension: { lsn: "0/1" } })));
    await record(haki);
    await record(haki);
    assert.equal(haki.consistencyToken, null);
  });

  test("a malformed header token falls back to the extensions' one", async () => {
    const haki = client(new Script(recorded({ header: "garbage", extension: "0/30" })));
    await record(haki);
    assert.equal(haki.consistencyToken, "0/30");
  });

  test("execute adopts the token of a mutation document, and reads the operation operationName selects", async () => {
    let script = new Script(answer({ recordEvent: { id: "e1" } }, { header: "0/50" }), answer(EVENTS_PAGE));
    let haki = client(script);
    await haki.execute('# writes\nmutation { recordEvent(input: {subjectId: "s", kind: "k", payload: {}}) { id } }');
    assert.equal(haki.consistencyToken, "0/50");
    await haki.execute('{ events(subjectId: "s") { pageInfo { hasNextPage } } }');
    assert.deepEqual(script.sent(), [null, "0/50"]);

    const document = `
      query Read { stats { events } }
      mutation Write { recordEvent(input: {subjectId: "s", kind: "k", payload: {}}) { id } }`;
    script = new Script(answer({ stats: { events: 1 } }, { header: "0/60" }), answer({ recordEvent: { id: "e" } }, { header: "0/70" }));
    haki = client(script);
    await haki.execute(document, {}, "Read");
    assert.equal(haki.consistencyToken, null);
    await haki.execute(document, {}, "Write");
    assert.equal(haki.consistencyToken, "0/70");
    assert.equal(script.requests[1]?.body?.["operationName"], "Write");
  });

  test("a mutation that wrote then failed still adopts its token", async () => {
    // The first field was written and committed; the second was rolled back.
    const body = {
      data: { a: { id: "e1" }, b: null },
      errors: [{ message: "rolled back; retry it", path: ["b"], extensions: { code: "UNAVAILABLE" } }],
    };
    const haki = client(new Script(json(body, 200, { [HEADER]: "0/80" })));
    await assert.rejects(haki.execute("mutation { a: recordEvent(input: {}) { id } b: recordEvent(input: {}) { id } }"), UnavailableError);
    assert.equal(haki.consistencyToken, "0/80");
  });

  test("a retry sends the token again", async () => {
    const down = json({ data: null, errors: [{ message: "down", extensions: { code: "UNAVAILABLE" } }] }, 503);
    const script = new Script(recorded({ header: "0/90" }), down, text("down", 503), eventsPage());
    const haki = client(script);
    await record(haki);
    await haki.events("s");
    assert.deepEqual(script.sent(), [null, "0/90", "0/90", "0/90"]);
  });

  test("the export request sends the token", async () => {
    const lines = [
      { format: "haki-context/subject", version: 1, subjectId: "s", exportedAt: "2026-08-01T10:00:00+00:00" },
      { type: "end", events: 0, facts: 0, conflicts: 0 },
    ];
    const script = new Script(recorded({ header: "0/A0" }), text(lines.map((line) => `${JSON.stringify(line)}\n`).join("")));
    const haki = client(script);
    await record(haki);
    const got = [];
    for await (const line of haki.exportSubject("s")) got.push(line);
    assert.deepEqual(got, lines);
    assert.equal(script.requests[1]?.url.pathname, "/export");
    assert.deepEqual(script.sent(), [null, "0/A0"]);
  });

  test("the token can be given, read, replaced and advanced", async () => {
    const script = new Script(eventsPage());
    const haki = client(script, { consistencyToken: " 0/16B3748 " });
    assert.equal(haki.consistencyToken, "0/16B3748");
    await haki.events("s");
    haki.consistencyToken = "0/10"; // replaces, even a higher one
    assert.equal(haki.consistencyToken, "0/10");
    assert.equal(haki.advanceConsistencyToken("0/8"), "0/10"); // keeps the higher
    assert.equal(haki.advanceConsistencyToken("2/0"), "2/0");
    await haki.events("s");
    haki.consistencyToken = null; // forgets it
    await haki.events("s");
    assert.throws(() => {
      haki.consistencyToken = "garbage";
    }, TypeError);
    assert.throws(() => haki.advanceConsistencyToken("0/x"), TypeError);
    assert.equal(haki.consistencyToken, null);
    assert.deepEqual(script.sent(), ["0/16B3748", "2/0", null]);
    assert.throws(() => client(script, { consistencyToken: "not a token" }), TypeError);
  });

  test("concurrent calls keep the highest token, whatever order their answers come back in", async () => {
    const positions = Array.from({ length: 100 }, (_, n) => (n * 7919) % 1000);
    const slow = async (_input: string, init: RequestInit): Promise<Response> => {
      const body = JSON.parse(String(init.body)) as { variables: { input: { payload: { n: number } } } };
      const position = body.variables.input.payload.n;
      await new Promise((resolve) => setTimeout(resolve, position % 5));
      return recorded({ header: `0/${position.toString(16).toUpperCase()}` })();
    };
    const haki = new HakiClient("http://haki.test", { retry: NO_WAIT, fetch: slow });
    await Promise.all(positions.map((n) => haki.recordEvent("s", "note", { n })));
    assert.equal(haki.consistencyToken, `0/${Math.max(...positions).toString(16).toUpperCase()}`);
  });
});

describe("which operation a request runs", () => {
  const cases: Array<[string, string | undefined, boolean]> = [
    ["mutation { a }", undefined, true],
    ["mutation M($x: In = {a: 1}) @d(b: 2) { a(x: $x) }", "M", true],
    ["mutation @d { a }", undefined, true],
    ["{ mutation }", undefined, false],
    ["query Q { mutation: a }", undefined, false],
    ["# mutation M { a }\nquery Q { a }", undefined, false],
    ['query Q { a(text: "mutation M { a }") }', undefined, false],
    ['query Q { a(text: """ \\""" mutation M { a } """) }', undefined, false],
    ["fragment F on Mutation { a } query Q { ...F }", undefined, false],
    ["query Q { ...F } fragment F on Mutation { a } mutation M { b }", "M", true],
    ["query Q { a } mutation M { b }", "Q", false],
    ["query Q { a } mutation M { b }", undefined, false], // ambiguous: the server refuses it
    ["query Q { a } mutation M { b }", "Other", false],
    ["subscription S { a }", undefined, false],
  ];
  for (const [document, operationName, mutation] of cases) {
    test(`${JSON.stringify(document)} (${operationName ?? "no name"}) is ${mutation ? "" : "not "}a mutation`, () => {
      assert.equal(isMutation(document, operationName), mutation);
    });
  }

  test("the operations of a document are read in order", () => {
    const document = 'query A { a } { b } mutation B($x: In = {s: "}"}) { c } subscription { d } fragment F on T { e }';
    assert.deepEqual(documentOperations(document), [
      ["query", "A"],
      ["query", null],
      ["mutation", "B"],
      ["subscription", null],
    ]);
  });

  test("a token is read as the log position hi/lo", () => {
    assert.equal(tokenPosition("0/16B3748"), 0x16b3748n);
    assert.equal(tokenPosition("1/0"), 1n << 32n);
    assert.equal(tokenPosition("FFFFFFFF/FFFFFFFF"), (1n << 64n) - 1n);
    assert.equal(tokenPosition("0/fF"), 0xffn);
    assert.equal(tokenPosition("100000000/0"), null);
    assert.equal(tokenPosition(null), null);
  });
});
