// Stored responses live in the memory of the server that produced them: SGLang's and vLLM's
// Responses API keep each response (with `store`, the default) where it was generated. A
// follow-up naming one with `previous_response_id` carries only its new turn, so its prompt
// cannot route it; it must reach that server, as must `GET /v1/responses/{id}`, its cancel,
// its input items and its delete. The router remembers which worker answered each response id
// it passed (from the answer's `id`, or a stream's `response.created` event), in a bounded
// table; an id it does not know (another replica answered it, or it was evicted) is looked for
// on the workers at once, with the engines' own retrieve route, and an id none holds is
// remembered as such for a while (a client repeating a stale id costs one search, not one per
// request).
import type { Agent } from 'undici';
import { request } from 'undici';
import type { Worker } from './rank-table.ts';

/** Response ids remembered at most (least recently used forgotten first). */
export const RESPONSE_HOMES_MAX = 100_000;
/** How long an id no worker held is not searched for again. */
export const RESPONSE_MISS_MS = 30_000;
const MISSES_MAX = 10_000;

export class ResponseHomes {
  /** id -> worker URL, in least- to most-recently-used order (a Map keeps insertion order). */
  private readonly homes = new Map<string, string>();
  /** id -> when a search found no worker holding it, oldest first. */
  private readonly misses = new Map<string, number>();

  constructor(
    private readonly maxEntries = RESPONSE_HOMES_MAX,
    private readonly now: () => number = () => performance.now(),
  ) {}

  remember(id: string, workerUrl: string): void {
    this.misses.delete(id);
    this.homes.delete(id);
    this.homes.set(id, workerUrl);
    if (this.homes.size > this.maxEntries) {
      const oldest = this.homes.keys().next().value as string;
      this.homes.delete(oldest);
    }
  }

  /** The worker URL that answered `id`, if this router passed it (and still remembers). */
  home(id: string): string | undefined {
    const url = this.homes.get(id);
    if (url !== undefined) this.remember(id, url);
    return url;
  }

  /** Forgets `id` (its response was deleted). */
  forget(id: string): void {
    this.homes.delete(id);
  }

  get size(): number {
    return this.homes.size;
  }

  /**
   * The worker among `candidates` that holds `id`, all asked at once with `GET
   * /v1/responses/{id}` within `timeoutMs` (the first in `candidates` that answers 200 is
   * remembered); undefined when none does, and then for RESPONSE_MISS_MS without asking.
   */
  async locate(
    id: string,
    candidates: readonly Worker[],
    agent: Agent,
    headers: Record<string, string>,
    timeoutMs: number,
  ): Promise<string | undefined> {
    const missed = this.misses.get(id);
    if (missed !== undefined && this.now() - missed < RESPONSE_MISS_MS) return undefined;
    const path = `/v1/responses/${encodeURIComponent(id)}`;
    const held = await Promise.all(
      candidates.map(async (w) => {
        try {
          const res = await request(`${w.url}${path}`, {
            method: 'GET',
            dispatcher: agent,
            headers,
            headersTimeout: timeoutMs,
            bodyTimeout: timeoutMs,
          });
          await res.body.dump();
          return res.statusCode === 200;
        } catch {
          // Unreachable or slow: not this one; health checks deal with the worker.
          return false;
        }
      }),
    );
    const at = held.indexOf(true);
    if (at >= 0) {
      const url = candidates[at]!.url;
      this.remember(id, url);
      return url;
    }
    this.misses.delete(id);
    this.misses.set(id, this.now());
    if (this.misses.size > MISSES_MAX)
      this.misses.delete(this.misses.keys().next().value as string);
    return undefined;
  }
}

const KEY = Buffer.from('"previous_response_id"');

/**
 * A Responses request's `previous_response_id`, or undefined. Most requests carry none, and are
 * told apart by a byte search; one that names the key is parsed (the key may sit inside a
 * string, and only the top-level member counts). The body was validated before.
 */
export function previousResponseId(raw: Buffer): string | undefined {
  if (raw.indexOf(KEY) === -1) return undefined;
  try {
    const id = (JSON.parse(raw.toString('utf8')) as { previous_response_id?: unknown })
      .previous_response_id;
    return typeof id === 'string' && id !== '' ? id : undefined;
  } catch {
    return undefined;
  }
}
