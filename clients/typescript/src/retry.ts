/**
 * When to try a call again: only UNAVAILABLE, with exponential backoff that never waits less
 * than the server's Retry-After, bounded in tries and in total time (the Python client's
 * RetryPolicy, in milliseconds).
 */

export interface RetryOptions {
  /** Tries in all, the first one included (1: never retry); with `maxTotalMs`, enough to ride
   * through a database failover (10-30 s under Patroni's defaults). Default 10. */
  attempts?: number;
  /** The first retry's wait before jitter. Default 250. */
  baseDelayMs?: number;
  /** The longest backoff between two tries (Retry-After may ask for more). Default 8000. */
  maxDelayMs?: number;
  /** No retry is made whose wait would end later than this after the first try. Default 30000. */
  maxTotalMs?: number;
}

/**
 * The n-th retry waits baseDelayMs * 2**(n-1), capped at maxDelayMs, with jitter (between half
 * and all of it) so that many clients refused at once do not come back at once; never less than
 * the server's Retry-After. A retry whose wait would end past maxTotalMs after the first try is
 * not made: the UnavailableError is thrown instead.
 */
export class RetryPolicy {
  readonly attempts: number;
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  readonly maxTotalMs: number;

  constructor(options: RetryOptions = {}) {
    this.attempts = options.attempts ?? 10;
    this.baseDelayMs = options.baseDelayMs ?? 250;
    this.maxDelayMs = options.maxDelayMs ?? 8000;
    this.maxTotalMs = options.maxTotalMs ?? 30000;
    if (!Number.isInteger(this.attempts) || this.attempts < 1) {
      throw new RangeError("attempts must be an integer of at least 1");
    }
    if (Math.min(this.baseDelayMs, this.maxDelayMs, this.maxTotalMs) < 0) {
      throw new RangeError("delays must not be negative");
    }
  }

  /** Milliseconds to wait before the next try, after `failedTries` failed ones and `elapsedMs`
   * since the first began; null when no try is left in count or in time. `random` is the jitter's
   * source, in [0, 1). */
  delay(failedTries: number, retryAfterMs: number | null, elapsedMs: number, random: () => number = Math.random): number | null {
    if (failedTries >= this.attempts) return null;
    const backoff = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (failedTries - 1));
    const wait = Math.max(backoff * (0.5 + 0.5 * random()), retryAfterMs ?? 0);
    if (elapsedMs + wait > this.maxTotalMs) return null;
    return wait;
  }
}

/** The Retry-After header in milliseconds: delta-seconds or an HTTP date; null when absent or
 * unreadable. A date in the past is 0. */
export function retryAfterMs(value: string | null | undefined, now: number = Date.now()): number | null {
  if (value === null || value === undefined) return null;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text) * 1000;
  // An HTTP date names its zone (GMT); a bare date or a number with a sign or fraction is no Retry-After.
  if (!/[A-Za-z]/.test(text)) return null;
  const when = Date.parse(text);
  return Number.isNaN(when) ? null : Math.max(0, when - now);
}
