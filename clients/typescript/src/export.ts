/**
 * The lines of `GET /export?subjectId=S`, checked as they pass.
 *
 * The server streams a subject's memory as JSON lines: a header (`format`, `version`,
 * `subjectId`, `exportedAt`), then one line per event, fact and conflict set (`type`), then
 * `{"type": "end", "events": n, "facts": n, "conflicts": n}`. The end line is the only proof that
 * the stream is whole, so the client counts the records and throws `IncompleteExportError` when
 * it is missing or disagrees, after handing out the lines before it.
 */

import { IncompleteExportError, InvalidResponseError, isRecord } from "./errors.js";

export const EXPORT_FORMAT = "haki-context/subject";
/** The end line's count of each record type. */
const COUNTED: Record<string, string> = { event: "events", fact: "facts", conflict: "conflicts" };

/** One line of an export: the header, a record (`type`: event, fact, conflict) or the end line. */
export type ExportLine = Record<string, unknown>;

/** Parses the lines of one export in order and checks that it is whole at the end. */
export class ExportCheck {
  readonly subjectId: string;
  #lines = 0;
  #counts = new Map<string, number>();
  #ended = false;

  constructor(subjectId: string) {
    this.subjectId = subjectId;
  }

  /** One line as an object; InvalidResponseError for a line that is no export record. */
  parse(line: string): ExportLine {
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch (cause) {
      throw new InvalidResponseError(`an export line is not JSON: ${JSON.stringify(line.slice(0, 200))}`, { cause });
    }
    if (!isRecord(record) || this.#ended) {
      throw new InvalidResponseError(`unexpected export line: ${JSON.stringify(line.slice(0, 200))}`);
    }
    if (this.#lines === 0 && record["format"] !== EXPORT_FORMAT) {
      throw new InvalidResponseError(`not a ${EXPORT_FORMAT} export: ${JSON.stringify(line.slice(0, 200))}`);
    }
    this.#lines += 1;
    const kind = record["type"];
    if (kind === "end") {
      this.#ended = true;
      const expected = Object.fromEntries(Object.values(COUNTED).map((name) => [name, record[name]]));
      const seen = Object.fromEntries(Object.entries(COUNTED).map(([type, name]) => [name, this.#counts.get(type) ?? 0]));
      if (Object.keys(seen).some((name) => expected[name] !== seen[name])) {
        throw new IncompleteExportError(
          `the export of ${JSON.stringify(this.subjectId)} announces ${JSON.stringify(expected)} records but holds ${JSON.stringify(seen)}`,
        );
      }
    } else if (typeof kind === "string") {
      this.#counts.set(kind, (this.#counts.get(kind) ?? 0) + 1);
    }
    return record;
  }

  /** Throw IncompleteExportError unless the end line came. */
  finish(): void {
    if (!this.#ended) {
      throw new IncompleteExportError(
        `the export of ${JSON.stringify(this.subjectId)} ended after ${this.#lines} line(s) without its end line`,
      );
    }
  }
}
