/**
 * Read-your-writes against a server with read replicas: the consistency token.
 *
 * A response to an operation that wrote something carries a token: the primary's write-ahead log
 * position after the commit, as PostgreSQL writes one (`0/16B3748`: the high and low 32 bits in
 * hexadecimal), in the `Haki-Consistency-Token` header and in `extensions.consistencyToken`. A
 * request that sends a token back in the same header is served by a replica that has replayed
 * past it, or by the primary.
 *
 * The client keeps the highest token of its mutations' responses (`ConsistencyToken`) and sends
 * it on every later request. It tells a mutation from a query by the keyword of the operation the
 * request selects (`isMutation`), read from the document by a small lexer that skips comments and
 * strings: the client needs no GraphQL parser. The rules are the Python client's
 * (clients/python/src/haki_context_client/_consistency.py).
 */

import { isRecord } from "./errors.js";

/** The header a response carries its token in, and a request sends one back in. */
export const TOKEN_HEADER = "Haki-Consistency-Token";
/** The key of a GraphQL response's `extensions` that holds the same token. */
export const TOKEN_EXTENSION = "consistencyToken";

const TOKEN = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;

/** The log position a token names, `(hi << 32) | lo`; null when it is not a well-formed token. */
export function tokenPosition(token: unknown): bigint | null {
  if (typeof token !== "string") return null;
  const match = TOKEN.exec(token.trim());
  if (match === null) return null;
  return (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`);
}

function checked(token: string): [string, bigint] {
  const position = tokenPosition(token);
  if (position === null) throw new TypeError(`not a consistency token (like 0/16B3748): ${JSON.stringify(token)}`);
  return [token.trim(), position];
}

/** The highest token a client has adopted, shared by its calls. */
export class ConsistencyToken {
  #token: string | null = null;
  #position = -1n;

  constructor(token: string | null = null) {
    this.replace(token);
  }

  /** The token held; null before any write. */
  get token(): string | null {
    return this.#token;
  }

  /** Hold `token` whatever it is lower than (null forgets the one held); TypeError when it is malformed. */
  replace(token: string | null): void {
    if (token === null) {
      this.#token = null;
      this.#position = -1n;
      return;
    }
    [this.#token, this.#position] = checked(token);
  }

  /** Hold `token` when it is higher than the one held; the token held then. TypeError when it is malformed. */
  advance(token: string): string {
    const [text, position] = checked(token);
    return this.#advance(text, position);
  }

  /** Adopt a response's token, from its header or else from its `extensions`, when it is higher
   * than the one held; a malformed or missing one is ignored. */
  adopt(headers: Headers, body: unknown): void {
    const fromBody = isRecord(body) && isRecord(body["extensions"]) ? body["extensions"][TOKEN_EXTENSION] : undefined;
    for (const candidate of [headers.get(TOKEN_HEADER), fromBody]) {
      const position = tokenPosition(candidate);
      if (position !== null) {
        this.#advance((candidate as string).trim(), position);
        return;
      }
    }
  }

  /** The request header that sends the token held; none before any write. */
  headers(): Record<string, string> {
    return this.#token === null ? {} : { [TOKEN_HEADER]: this.#token };
  }

  #advance(token: string, position: bigint): string {
    if (position > this.#position) {
      this.#token = token;
      this.#position = position;
    }
    return this.#token as string;
  }
}

// ----------------------------------------------------------- which operation a request runs

const LEXEME =
  /(?<skip>[\s,\ufeff]+|#[^\n\r]*)|(?<block>"""(?:\\"""|[\s\S])*?""")|(?<string>"(?:\\[\s\S]|[^"\\\n\r])*")|(?<name>[_A-Za-z][_0-9A-Za-z]*)|(?<punct>[\s\S])/g;
const OPERATION_KEYWORDS = new Set(["query", "mutation", "subscription"]);
const OPENING = new Set(["{", "(", "["]);
const CLOSING = new Set(["}", ")", "]"]);

export type OperationKeyword = "query" | "mutation" | "subscription";

/** The operations a GraphQL document defines, in order: [keyword, name or null]. The shorthand
 * `{ ... }` is an anonymous query; fragments are left out. */
export function documentOperations(document: string): Array<[OperationKeyword, string | null]> {
  const operations: Array<[OperationKeyword, string | null]> = [];
  let expecting: "definition" | "name" | "body" = "definition";
  let keyword: OperationKeyword = "query";
  let depth = 0;
  for (const lexeme of document.matchAll(LEXEME)) {
    const groups = lexeme.groups ?? {};
    const text = lexeme[0];
    if (groups["skip"] !== undefined || groups["block"] !== undefined || groups["string"] !== undefined) continue;
    if (groups["name"] !== undefined) {
      if (depth === 0 && expecting === "definition") {
        if (OPERATION_KEYWORDS.has(text)) {
          keyword = text as OperationKeyword;
          expecting = "name";
        } else {
          expecting = "body"; // a fragment
        }
      } else if (depth === 0 && expecting === "name") {
        operations.push([keyword, text]);
        expecting = "body";
      }
      continue;
    }
    if (depth === 0 && expecting === "definition" && text === "{") {
      operations.push(["query", null]);
      expecting = "body";
    } else if (depth === 0 && expecting === "name") {
      // `(`, `@` or `{` right after the keyword: an anonymous operation.
      operations.push([keyword, null]);
      expecting = "body";
    }
    if (OPENING.has(text)) {
      depth += 1;
    } else if (CLOSING.has(text) && depth > 0) {
      depth -= 1;
      if (depth === 0 && text === "}") expecting = "definition";
    }
  }
  return operations;
}

const KEYWORD_CACHE = new Map<string, OperationKeyword | null>();
const KEYWORD_CACHE_SIZE = 512;

/** `query`, `mutation` or `subscription`: the operation a request of `document` and
 * `operationName` runs; null when it names none (the server refuses such a request). */
export function operationKeyword(document: string, operationName?: string | null): OperationKeyword | null {
  const key = `${operationName ?? ""}\u0000${document}`;
  const cached = KEYWORD_CACHE.get(key);
  if (cached !== undefined) return cached;
  const operations = documentOperations(document);
  let found: OperationKeyword | null;
  if (!operationName) {
    found = operations.length === 1 ? operations[0]![0] : null;
  } else {
    found = operations.find(([, name]) => name === operationName)?.[0] ?? null;
  }
  if (KEYWORD_CACHE.size >= KEYWORD_CACHE_SIZE) KEYWORD_CACHE.clear();
  KEYWORD_CACHE.set(key, found);
  return found;
}

/** Whether the request runs a mutation (cached per document and operation name). */
export function isMutation(document: string, operationName?: string | null): boolean {
  return document.includes("mutation") && operationKeyword(document, operationName) === "mutation";
}

/** The name of the document's only operation; undefined when it has none or several. */
export function soleOperationName(document: string): string | undefined {
  const operations = documentOperations(document);
  return operations.length === 1 ? (operations[0]![1] ?? undefined) : undefined;
}
