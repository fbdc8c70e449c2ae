/**
 * An agent loop with memory: before each model call, `context` says what memory holds about the
 * user for this message, under a token budget; after it, `recordEvents` records the exchange.
 * The model is any OpenAI-compatible chat completions endpoint, called with plain fetch.
 *
 *   node dist-test/examples/agent-loop.js user-42 "Please send my invoices in French." "Which language should invoices use?"
 *
 * Settings (environment): HAKI_URL (default http://127.0.0.1:8000), HAKI_API_KEY (none in
 * development mode), MODEL_URL (default https://api.openai.com/v1), MODEL_API_KEY, MODEL
 * (default gpt-4o-mini).
 */

import { pathToFileURL } from "node:url";

import { HakiClient, UnavailableError } from "haki-context-client";

export interface Model {
  /** The API's root: `${url}/chat/completions` is called. */
  url: string;
  apiKey?: string | undefined;
  name: string;
}

/** One chat completion: the system prompt and the user's message in, the reply's text out. */
export async function callModel(model: Model, system: string, user: string): Promise<string> {
  const response = await fetch(`${model.url.replace(/\/+$/, "")}/chat/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json", ...(model.apiKey ? { Authorization: `Bearer ${model.apiKey}` } : {}) },
    body: JSON.stringify({
      model: model.name,
      messages: [
        { role: "system", content: system },
        { role: "user", content: user },
      ],
    }),
  });
  if (!response.ok) throw new Error(`the model answered HTTP ${response.status}: ${await response.text()}`);
  const body = (await response.json()) as { choices: Array<{ message: { content: string | null } }> };
  return body.choices[0]?.message.content ?? "";
}

/** One turn: what memory holds, the model call, the exchange recorded. */
export async function turn(haki: HakiClient, model: Model, user: string, message: string): Promise<{ reply: string; traceId: string | null }> {
  // 1. Before the model call: what memory holds for this message, under a budget.
  let memory = "";
  let traceId: string | null = null;
  try {
    const packet = await haki.context(user, message, { budget: 900 });
    memory = packet.rendered;
    traceId = packet.traceId; // keep it with the model call's log: haki.trace(traceId) says why
  } catch (error) {
    // UNAVAILABLE was retried with backoff first; then the agent answers without memory.
    if (!(error instanceof UnavailableError)) throw error;
  }
  const reply = await callModel(model, `You are a helpful agent. What you know about the user:\n${memory}`, message);
  // 2. After it: record the exchange, both messages or neither.
  await haki.recordEvents([
    { subjectId: user, kind: "conversation.message", payload: { speaker: "user", text: message } },
    { subjectId: user, kind: "conversation.message", payload: { speaker: "agent", text: reply } },
  ]);
  return { reply, traceId };
}

async function main(args: string[]): Promise<void> {
  const [user, ...messages] = args;
  if (user === undefined || messages.length === 0) {
    console.error("usage: agent-loop.js SUBJECT MESSAGE [MESSAGE...]");
    process.exitCode = 2;
    return;
  }
  const env = process.env;
  const haki = new HakiClient(env["HAKI_URL"] ?? "http://127.0.0.1:8000", env["HAKI_API_KEY"] ? { apiKey: env["HAKI_API_KEY"] } : {});
  const model: Model = {
    url: env["MODEL_URL"] ?? "https://api.openai.com/v1",
    apiKey: env["MODEL_API_KEY"],
    name: env["MODEL"] ?? "gpt-4o-mini",
  };
  for (const message of messages) {
    const { reply, traceId } = await turn(haki, model, user, message);
    console.log(`> ${message}\n${reply}\n(trace ${traceId})`);
  }
}

// Run as a script (not when imported).
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await main(process.argv.slice(2));
}
