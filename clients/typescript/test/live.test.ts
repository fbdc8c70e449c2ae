/**
 * The client against a live `haki-context serve` (see support/server.ts): the Python client's
 * conversation scenario and every method, the Bearer key, the server's errors with their codes,
 * the consistency token, and the agent loop example with its model stubbed (the memory is the
 * live server's).
 *
 * The server's executable is HAKI_CONTEXT_BIN, else `haki-context` on PATH; without one these
 * tests skip, saying so.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import {
  BudgetExceededError,
  FactsDocument,
  ForbiddenError,
  GraphQLRequestError,
  HakiClient,
  HakiError,
  IllegalTransitionError,
  InvalidInputError,
  NotFoundError,
  UnauthenticatedError,
  type FetchLike,
} from "haki-context-client";

import { findServer, startServer, type LiveServer } from "./support/server.js";

const CONVERSATION = [
  { speaker: "Ann", text: "Please send my invoices in French." },
  { speaker: "Agent", text: "Noted: invoices in French from now on." },
];
const QUESTION = "Which language should invoices use?";

const found = findServer();
let server: LiveServer;

/** A subject id no other test uses. */
function newSubject(): string {
  return `ts-client-${randomUUID().slice(0, 12)}`;
}

async function rejection<T extends Error>(promise: Promise<unknown>, cls: new (...args: never[]) => T): Promise<T> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof cls, `expected a ${cls.name}, got ${String(error)}`);
    return error;
  }
  assert.fail(`expected a ${cls.name}, got an answer`);
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const all: T[] = [];
  for await (const item of items) all.push(item);
  return all;
}

describe("against a live haki-context serve", { skip: "skip" in found ? found.skip : false }, () => {
  before(async () => {
    if ("bin" in found) server = await startServer(found.bin);
  });
  after(async () => {
    await server?.close();
  });

  const client = (apiKey: string = server.key) => new HakiClient(server.url, { apiKey });

  test("a session records, asserts and gets context with its trace", async () => {
    const haki = client();
    const subject = newSubject();
    const events = await haki.remember(subject, CONVERSATION);
    assert.deepEqual(
      events.map((e) => e.payload),
      CONVERSATION,
    );
    assert.ok(events.every((e) => e.subjectId === subject && e.kind === "conversation.message"));

    const assertion = await haki.assertFact(subject, "invoice_language", "French", {
      confidence: 0.9,
      sourceEventIds: [events[0]!.id],
    });
    assert.equal(assertion.outcome, "CREATED");
    const fact = assertion.fact;
    assert.equal(fact.status, "ACTIVE");
    assert.equal(fact.value, "French");
    assert.equal(fact.confidence, 0.9);
    assert.deepEqual(fact.sourceEventIds, [events[0]!.id]);

    const packet = await haki.context(subject, QUESTION, { budget: 500 });
    assert.equal(packet.budgetTokens, 500);
    assert.equal(packet.status, "OK");
    assert.match(packet.rendered, /French/);
    const served = packet.facts.find((f) => f.id === fact.id);
    assert.equal(served?.reasonCode, "TOP_SCORE");
    assert.deepEqual(served?.sourceEventIds, [events[0]!.id]);

    const trace = await haki.trace(packet.traceId);
    assert.ok(trace !== null);
    assert.equal(trace.id, packet.traceId);
    assert.equal(trace.query, QUESTION);
    const included = trace.decisions.filter((d) => d.decision === "INCLUDED" && d.itemKind === "FACT");
    assert.deepEqual(
      included.map((d) => d.itemId),
      [fact.id],
    );
    assert.equal(included[0]?.fact?.predicate, "invoice_language");
    const onlyEpisodes = await haki.trace(packet.traceId, { itemKind: "EPISODE" });
    assert.ok(onlyEpisodes !== null && onlyEpisodes.decisions.every((d) => d.itemKind === "EPISODE"));

    const listed = await haki.traces({ subjectId: subject });
    assert.deepEqual(
      listed.edges.map((edge) => edge.node.id),
      [packet.traceId],
    );
    assert.equal(listed.edges[0]?.node.counts.included, trace.counts.included);
  });

  test("events and facts page, read back and retract", async () => {
    const haki = client();
    const subject = newSubject();
    const first = await haki.recordEvent(subject, "note", { text: "likes green tea" }, { occurredAt: new Date(Date.UTC(2026, 0, 2, 3, 4, 5)) });
    assert.equal(Date.parse(first.occurredAt), Date.UTC(2026, 0, 2, 3, 4, 5));
    await haki.recordEvents([{ subjectId: subject, kind: "note", payload: { text: "lives in Porto" } }]);
    const assertions = await haki.assertFacts([
      { subjectId: subject, predicate: "drink", value: "green tea" },
      { subjectId: subject, predicate: "city", value: "Porto", volatility: "SLOW" },
    ]);
    assert.deepEqual(
      assertions.map((a) => a.fact.predicate),
      ["drink", "city"],
    );

    const page = await haki.facts(subject, { first: 1 });
    assert.equal(page.edges.length, 1);
    assert.ok(page.pageInfo.hasNextPage && page.pageInfo.endCursor !== null);
    const rest = await haki.facts(subject, { first: 10, after: page.pageInfo.endCursor });
    assert.deepEqual(new Set([...page.edges, ...rest.edges].map((e) => e.node.predicate)), new Set(["drink", "city"]));

    const events = await haki.events(subject);
    assert.equal(events.edges.length, 2);
    assert.equal(events.pageInfo.hasNextPage, false);
    assert.deepEqual(await haki.event(first.id), first);

    const drink = assertions[0]!.fact;
    const retracted = await haki.retractFact(drink.id, { reason: "changed their mind" });
    assert.equal(retracted.status, "RETRACTED");
    assert.ok(retracted.version > drink.version);
    assert.equal((await haki.fact(drink.id))?.status, "RETRACTED");
    const active = await haki.facts(subject, { status: "ACTIVE" });
    assert.deepEqual(
      active.edges.map((e) => e.node.id),
      [assertions[1]!.fact.id],
    );
    const packet = await haki.context(subject, "What do they drink?");
    assert.ok(!packet.facts.some((f) => f.id === drink.id));

    const stats = await haki.stats();
    assert.ok(stats.events >= 2 && stats.contextCalls >= 1);
    assert.equal(await haki.fact(randomUUID()), null);
  });

  test("context counts its budget in the tokenizer it names", async () => {
    const haki = client();
    const subject = newSubject();
    await haki.remember(subject, CONVERSATION);
    const estimated = await haki.context(subject, QUESTION, { budget: 500 });
    let last = estimated;
    for (const tokenizer of ["CL100K_BASE", "O200K_BASE"] as const) {
      last = await haki.context(subject, QUESTION, { budget: 500, tokenizer });
      assert.equal(last.rendered, estimated.rendered); // the same lines, counted otherwise
      assert.notEqual(last.usedTokens, estimated.usedTokens);
      assert.ok(last.usedTokens <= 500);
    }
    const replayed = await haki.replay(last.traceId);
    assert.ok(replayed.diff.identical);
    assert.equal((replayed.settings.values as Record<string, unknown>)["tokenizer"], "o200k_base");
  });

  test("a new value supersedes and a contested one opens a conflict", async () => {
    const haki = client();
    const subject = newSubject();
    const old = (await haki.assertFact(subject, "language", "French")).fact;
    const newer = await haki.assertFact(subject, "language", "German");
    assert.equal(newer.outcome, "SUPERSEDED_PREVIOUS");
    assert.deepEqual(
      newer.superseded.map((f) => f.id),
      [old.id],
    );
    const contested = await haki.assertFact(subject, "language", "Dutch", { mode: "CONTEST" });
    assert.equal(contested.outcome, "CONFLICT_OPENED");
    assert.equal(contested.conflict?.status, "OPEN");
  });

  test("context asOf a past instant and a replay show what memory gave then and what changed since", async () => {
    const haki = client();
    const subject = newSubject();
    const french = (await haki.assertFact(subject, "invoice_language", "French")).fact;
    const stored = await haki.context(subject, QUESTION);
    const trace = await haki.trace(stored.traceId);
    assert.ok(trace !== null);
    const then = trace.createdAt;
    const german = await haki.assertFact(subject, "invoice_language", "German");
    assert.deepEqual(
      german.superseded.map((f) => f.id),
      [french.id],
    );

    const past = await haki.context(subject, QUESTION, { asOf: then });
    assert.deepEqual(
      past.facts.map((f) => f.id),
      [french.id],
    );
    assert.doesNotMatch(past.rendered, /German/);
    const pastByDate = await haki.context(subject, QUESTION, { asOf: new Date(Date.parse(then) + 1) });
    assert.deepEqual(
      pastByDate.facts.map((f) => f.id),
      [french.id],
    );
    assert.deepEqual(
      (await haki.context(subject, QUESTION)).facts.map((f) => f.id),
      [german.fact.id],
    );

    const again = await haki.replay(stored.traceId);
    assert.ok(again.diff.identical);
    assert.deepEqual(again.diff.changes, []);
    assert.equal(again.packet.rendered, stored.rendered);
    assert.equal(Date.parse(again.asOf), Date.parse(then));
    assert.ok(!again.comparedWithNow && !again.persisted);
    assert.equal(again.original.id, stored.traceId);
    assert.ok(again.notes.some((n) => n.includes("exact plan")));

    const now = await haki.replay(stored.traceId, { compareWithNow: true });
    assert.ok(now.comparedWithNow && Date.parse(now.asOf) > Date.parse(then) && !now.diff.identical);
    const changes = new Map(now.diff.changes.map((c) => [c.itemId, c]));
    const removed = changes.get(french.id);
    assert.deepEqual(removed?.kinds, ["REMOVED"]);
    assert.equal(removed?.after, null);
    assert.equal(removed?.before?.fact?.value, "French");
    assert.ok(removed?.why?.startsWith("superseded at ") && removed.why.includes(german.fact.id));
    assert.deepEqual(changes.get(german.fact.id)?.kinds, ["ADDED"]);
    assert.deepEqual([now.diff.removed, now.diff.added], [1, 1]);
  });

  test("a replay runs with overrides and a stored trace, and the server's codes are thrown", async () => {
    const haki = client();
    const subject = newSubject();
    await haki.assertFact(subject, "invoice_language", "French");
    const stored = await haki.context(subject, QUESTION, { budget: 600 });
    const smaller = await haki.replay(stored.traceId, { overrides: { budget: 300 } });
    assert.equal(smaller.packet.budgetTokens, 300);
    assert.equal(stored.budgetTokens, 600);
    const profiled = await haki.replay(stored.traceId, { overrides: { profile: "CLASSIC" } });
    assert.equal(profiled.settings.rankingProfile, "classic");
    const kept = await haki.replay(stored.traceId, { persist: true });
    assert.ok(kept.persisted && (await haki.trace(kept.packet.traceId)) !== null);
    await rejection(haki.replay(randomUUID()), NotFoundError);
    await rejection(haki.context(subject, QUESTION, { asOf: new Date(Date.UTC(2999, 0, 1)) }), InvalidInputError);
  });

  test("the key picks the project and a bad key is UNAUTHENTICATED (401)", async () => {
    const subject = newSubject();
    const fact = (await client().assertFact(subject, "secret", "kept in this project")).fact;
    assert.notEqual(await client().fact(fact.id), null);
    const other = client(server.otherKey);
    assert.equal(await other.fact(fact.id), null);
    assert.deepEqual((await other.facts(subject)).edges, []);
    assert.equal(await new HakiClient(server.url).fact(fact.id), null); // development mode: project `default`
    const wrong = await rejection(client(`hk_${"x".repeat(43)}`).context(subject, QUESTION), UnauthenticatedError);
    assert.equal(wrong.code, "UNAUTHENTICATED");
    assert.equal(wrong.statusCode, 401);
    await rejection(client("not-a-key").remember(subject, ["hello"]), UnauthenticatedError);
  });

  test("the server's errors are thrown with their codes", async () => {
    const haki = client();
    const subject = newSubject();
    const budget = await rejection(haki.context(subject, QUESTION, { budget: 0 }), BudgetExceededError);
    assert.equal(budget.code, "BUDGET_EXCEEDED");
    assert.deepEqual(budget.path, ["context"]);
    await rejection(haki.retractFact(randomUUID()), NotFoundError);
    const invalid = await rejection(haki.recordEvent("", "note", {}), InvalidInputError);
    assert.equal(invalid.code, "INVALID_INPUT");
    const fact = (await haki.assertFact(subject, "p", 1)).fact;
    await haki.retractFact(fact.id);
    await rejection(haki.retractFact(fact.id), IllegalTransitionError);
    const invalidDocument = await rejection(haki.execute("query { noSuchField }"), GraphQLRequestError);
    assert.equal(invalidDocument.code, "GRAPHQL_VALIDATION_FAILED");
    const unparsable = await rejection(haki.execute("query {"), GraphQLRequestError);
    assert.equal(unparsable.code, "GRAPHQL_PARSE_FAILED");
    assert.ok(unparsable instanceof HakiError);
  });

  test("execute runs any document with the same key, typed when given a typed document", async () => {
    const haki = client();
    const subject = newSubject();
    await haki.assertFact(subject, "colour", "blue");
    const data = await haki.execute("query($s: String!) { facts(subjectId: $s) { edges { node { predicate value } } } }", { s: subject });
    assert.deepEqual(data, { facts: { edges: [{ node: { predicate: "colour", value: "blue" } }] } });
    const typed = await haki.execute(FactsDocument, { subjectId: subject, first: 5 });
    assert.equal(typed.facts.edges[0]?.node.value, "blue");
  });

  test("forgetSubject deletes what the project holds about the subject, with a key that may erase", async () => {
    const haki = client();
    const subject = newSubject();
    const events = await haki.remember(subject, CONVERSATION);
    const fact = (await haki.assertFact(subject, "invoice_language", "French", { sourceEventIds: [events[0]!.id] })).fact;
    const packet = await haki.context(subject, QUESTION);
    const denied = await rejection(haki.forgetSubject(subject), ForbiddenError); // read and write only
    assert.equal(denied.code, "FORBIDDEN");
    assert.notEqual(await haki.fact(fact.id), null);

    const forgotten = await client(server.eraserKey).forgetSubject(subject);
    assert.equal(forgotten.subjectId, subject);
    assert.ok(forgotten.erasureId);
    assert.deepEqual([forgotten.events, forgotten.facts, forgotten.traces], [2, 1, 1]);
    assert.deepEqual((await haki.facts(subject)).edges, []);
    assert.deepEqual((await haki.events(subject)).edges, []);
    assert.deepEqual((await haki.traces({ subjectId: subject })).edges, []);
    assert.equal(await haki.trace(packet.traceId), null);
    assert.deepEqual((await haki.context(subject, QUESTION)).facts, []);
    assert.deepEqual(
      (await collect(haki.exportSubject(subject))).map((line) => line["type"]),
      [undefined, "end"],
    );
  });

  test("a read-only key reads and exports but cannot write", async () => {
    const subject = newSubject();
    await client().assertFact(subject, "colour", "blue");
    const reader = client(server.readerKey);
    assert.match((await reader.context(subject, "Which colour?")).rendered, /blue/);
    assert.deepEqual(
      (await collect(reader.exportSubject(subject))).map((line) => line["type"]),
      [undefined, "fact", "end"],
    );
    const denied = await rejection(reader.assertFact(subject, "colour", "red"), ForbiddenError);
    assert.equal(denied.code, "FORBIDDEN");
  });

  test("exportSubject streams the header, every record and the end line", async () => {
    const haki = client();
    const subject = newSubject();
    const events = await haki.remember(subject, CONVERSATION);
    const fact = (await haki.assertFact(subject, "invoice_language", "French", { sourceEventIds: [events[1]!.id] })).fact;
    const lines = await collect(haki.exportSubject(subject));
    const header = lines[0]!;
    const end = lines.at(-1);
    const records = lines.slice(1, -1);
    assert.equal(header["format"], "haki-context/subject");
    assert.equal(header["subjectId"], subject);
    assert.deepEqual(
      records.filter((r) => r["type"] === "event").map((r) => r["id"]).sort(),
      events.map((e) => e.id).sort(),
    );
    const exported = records.filter((r) => r["type"] === "fact");
    assert.deepEqual(
      exported.map((r) => [r["id"], r["value"], r["sourceEventIds"]]),
      [[fact.id, "French", [events[1]!.id]]],
    );
    assert.deepEqual(end, { type: "end", events: 2, facts: 1, conflicts: 0 });
    await rejection(collect(client(`hk_${"y".repeat(43)}`).exportSubject(subject)), UnauthenticatedError);
  });

  test("a write's consistency token is kept and sent back on the next requests", async () => {
    const sent: Array<string | null> = [];
    const spy: FetchLike = (input, init) => {
      sent.push(new Headers(init.headers).get("Haki-Consistency-Token"));
      return fetch(input, init);
    };
    const haki = new HakiClient(server.url, { apiKey: server.key, fetch: spy });
    const subject = newSubject();
    await haki.events(subject);
    assert.equal(haki.consistencyToken, null);
    await haki.remember(subject, CONVERSATION);
    const token = haki.consistencyToken;
    assert.match(token ?? "", /^[0-9A-F]{1,8}\/[0-9A-F]{1,8}$/);
    const packet = await haki.context(subject, QUESTION);
    assert.ok(packet.episodes.length > 0);
    assert.deepEqual(sent, [null, null, token]);
  });

  test("the agent loop example records each exchange and gives the model what memory holds", async () => {
    const prompts: Array<{ system: string; user: string }> = [];
    const model = createServer((request: IncomingMessage, response: ServerResponse) => {
      let body = "";
      request.on("data", (chunk: Buffer) => (body += chunk.toString()));
      request.on("end", () => {
        const { messages } = JSON.parse(body) as { messages: Array<{ role: string; content: string }> };
        prompts.push({ system: messages[0]!.content, user: messages[1]!.content });
        const reply = prompts.length === 1 ? "Noted: invoices in French from now on." : "In French.";
        response.writeHead(200, { "Content-Type": "application/json" });
        response.end(JSON.stringify({ choices: [{ index: 0, message: { role: "assistant", content: reply } }] }));
      });
    });
    await new Promise<void>((resolve) => model.listen(0, "127.0.0.1", resolve));
    const modelUrl = `http://127.0.0.1:${(model.address() as AddressInfo).port}/v1`;
    try {
      const subject = newSubject();
      const script = fileURLToPath(new URL("../examples/agent-loop.js", import.meta.url));
      const env = { ...process.env, HAKI_URL: server.url, HAKI_API_KEY: server.key, MODEL_URL: modelUrl, MODEL_API_KEY: "sk-test" };
      const { stdout } = await promisify(execFile)(process.execPath, [script, subject, "Please send my invoices in French.", QUESTION], {
        env,
        timeout: 60_000,
      });
      assert.match(stdout, /> Please send my invoices in French\.\nNoted: invoices in French from now on\./);
      assert.match(stdout, /> Which language should invoices use\?\nIn French\./);

      // The first call knew nothing; the second was given the first exchange from memory.
      assert.equal(prompts.length, 2);
      assert.doesNotMatch(prompts[0]!.system, /French/);
      assert.match(prompts[1]!.system, /Please send my invoices in French\./);
      assert.equal(prompts[1]!.user, QUESTION);

      const recorded = await client().events(subject);
      assert.deepEqual(
        recorded.edges.map((e) => e.node.payload).reverse(),
        [
          { speaker: "user", text: "Please send my invoices in French." },
          { speaker: "agent", text: "Noted: invoices in French from now on." },
          { speaker: "user", text: QUESTION },
          { speaker: "agent", text: "In French." },
        ],
      );
      assert.equal((await client().traces({ subjectId: subject })).edges.length, 2);
    } finally {
      model.close();
    }
  });
});
