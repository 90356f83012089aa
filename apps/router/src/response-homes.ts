// Stored responses live in the memory of the server that produced them: SGLang's and vLLM's
// Responses API keep each response (with `store`, the default) where it was generated. A
// follow-up naming one with `previous_response_id` carries only its new turn, so its prompt
// cannot route it; it must reach that server, as must `GET /v1/responses/{id}`, its cancel,
// its input items and its delete. The router remembers which worker answered each response id
// it passed (from the answer's `id`, or a stream's `response.created` event), in a bounded
// table; an id it does not know (another replica answered it, or it was evicted) is looked for
// on the workers, one at a time, with the engines' own retrieve route.
import type { Agent } from 'undici';
import { request } from 'undici';
import type { Worker } from './rank-table.ts';

/** Response ids remembered at most (least recently used forgotten first). */
export const RESPONSE_HOMES_MAX = 100_000;

export class ResponseHomes {
  /** id -> worker URL, in least- to most-recently-used order (a Map keeps insertion order). */
  private readonly homes = new Map<string, string>();

  constructor(private readonly maxEntries = RESPONSE_HOMES_MAX) {}

  remember(id: string, workerUrl: string): void {
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

  get size(): number {
    return this.homes.size;
  }

  /**
   * The worker among `candidates` that holds `id`, asked in turn with `GET /v1/responses/{id}`
   * (the first 200 wins and is remembered); undefined when none does or none answers.
   */
  async locate(
    id: string,
    candidates: readonly Worker[],
    agent: Agent,
    headers: Record<string, string>,
    timeoutMs: number,
  ): Promise<string | undefined> {
    for (const w of candidates) {
      try {
        const res = await request(`${w.url}/v1/responses/${encodeURIComponent(id)}`, {
          method: 'GET',
          dispatcher: agent,
          headers,
          headersTimeout: timeoutMs,
          bodyTimeout: timeoutMs,
        });
        await res.body.dump();
        if (res.statusCode === 200) {
          this.remember(id, w.url);
          return w.url;
        }
      } catch {
        // Unreachable: the next one; health checks deal with the worker.
      }
    }
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
