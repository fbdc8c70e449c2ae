/** A scripted fetch: answers requests in order (the last one again when it runs out) and keeps them. */

export type Answer = (() => Response) | Error;

export interface SentRequest {
  url: URL;
  method: string;
  headers: Headers;
  body: Record<string, unknown> | undefined;
}

export class Script {
  readonly requests: SentRequest[] = [];
  readonly #answers: Answer[];

  constructor(...answers: Answer[]) {
    this.#answers = answers;
  }

  readonly fetch = async (input: string, init: RequestInit): Promise<Response> => {
    this.requests.push({
      url: new URL(input),
      method: init.method ?? "GET",
      headers: new Headers(init.headers),
      body: typeof init.body === "string" ? (JSON.parse(init.body) as Record<string, unknown>) : undefined,
    });
    const answer = this.#answers[Math.min(this.requests.length, this.#answers.length) - 1];
    if (answer === undefined) throw new Error("the script has no answer");
    if (answer instanceof Error) throw answer;
    return answer();
  };

  /** The consistency token each request sent, in order (null: no header). */
  sent(): Array<string | null> {
    return this.requests.map((request) => request.headers.get("Haki-Consistency-Token"));
  }
}

/** A JSON answer. */
export function json(body: unknown, status = 200, headers: Record<string, string> = {}): () => Response {
  return () => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });
}

/** A plain-text answer (a proxy's page, a body that is no JSON). */
export function text(body: string, status = 200, headers: Record<string, string> = {}): () => Response {
  return () => new Response(body, { status, headers });
}

/** UNAVAILABLE as the server sends it: HTTP 503, a GraphQL error, and Retry-After when given. */
export function unavailable(retryAfter: string | null = "0"): () => Response {
  const body = { data: null, errors: [{ message: "database unavailable", extensions: { code: "UNAVAILABLE" } }] };
  return json(body, 503, retryAfter === null ? {} : { "Retry-After": retryAfter });
}

/** One GraphQL error with `code`. */
export function coded(code: string, status = 200): () => Response {
  return json({ data: null, errors: [{ message: `a ${code}`, extensions: { code } }] }, status);
}
