// Reads the worker-reported prompt and cached token counts out of a response while it is
// being piped to the client, without holding the stream back. SSE: remember only the last
// complete `data:` line that mentions prompt tokens (the final chunk carries usage; SGLang's
// /generate repeats meta_info in every chunk) and parse it once at the end. Plain JSON:
// keep a copy up to a cap and parse at the end.
import { StringDecoder } from 'node:string_decoder';

export interface ReportedUsage {
  promptTokens: number;
  cachedTokens: number;
}

const JSON_COPY_CAP = 4 * 1024 * 1024;

/** Pulls usage out of an SGLang (`meta_info`) or OpenAI (`usage`) response object. */
export function usageFromObject(obj: unknown): ReportedUsage | undefined {
  if (!obj || typeof obj !== 'object') return undefined;
  const o = obj as Record<string, unknown>;
  const meta = o.meta_info as Record<string, unknown> | undefined;
  if (meta && typeof meta === 'object' && typeof meta.prompt_tokens === 'number') {
    const cached = typeof meta.cached_tokens === 'number' ? meta.cached_tokens : 0;
    return { promptTokens: meta.prompt_tokens, cachedTokens: cached };
  }
  const usage = o.usage as Record<string, unknown> | undefined | null;
  if (usage && typeof usage === 'object' && typeof usage.prompt_tokens === 'number') {
    const details = usage.prompt_tokens_details as Record<string, unknown> | undefined | null;
    const cached = details && typeof details.cached_tokens === 'number' ? details.cached_tokens : 0;
    return { promptTokens: usage.prompt_tokens, cachedTokens: cached };
  }
  return undefined;
}

export class UsageScanner {
  /** SSE only: lines may straddle chunks, and so may a UTF-8 sequence. */
  private readonly decoder: StringDecoder | undefined;
  private partial = '';
  private lastUsageLine: string | undefined;
  // Plain JSON: the chunks themselves (the response holds on to them while they are written
  // anyway), decoded once at the end instead of through the StringDecoder chunk by chunk.
  private copy: Buffer[] | undefined;
  private copyBytes = 0;

  constructor(readonly sse: boolean) {
    if (sse) this.decoder = new StringDecoder('utf8');
    else this.copy = [];
  }

  push(chunk: Buffer): void {
    if (!this.sse) {
      if (this.copy && this.copyBytes + chunk.length <= JSON_COPY_CAP) {
        this.copy.push(chunk);
        this.copyBytes += chunk.length;
      } else {
        this.copy = undefined;
      }
      return;
    }
    const text = this.partial + this.decoder!.write(chunk);
    let start = 0;
    for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
      this.line(text, start, nl);
      start = nl + 1;
    }
    this.partial = start === 0 ? text : text.slice(start);
  }

  private line(text: string, start: number, end: number): void {
    // `data:` lines only; cheap substring test before keeping a reference.
    if (end - start < 8 || text.charCodeAt(start) !== 100 /* d */) return;
    const line = text.slice(start, end);
    if (line.startsWith('data:') && line.includes('"prompt_tokens"')) this.lastUsageLine = line;
  }

  result(): ReportedUsage | undefined {
    try {
      if (!this.sse) {
        if (!this.copy) return undefined;
        const bytes =
          this.copy.length === 1 ? this.copy[0]! : Buffer.concat(this.copy, this.copyBytes);
        return usageFromObject(JSON.parse(bytes.toString('utf8')));
      }
      if (this.partial.startsWith('data:') && this.partial.includes('"prompt_tokens"')) {
        this.lastUsageLine = this.partial;
      }
      if (!this.lastUsageLine) return undefined;
      return usageFromObject(JSON.parse(this.lastUsageLine.slice(5).trim()));
    } catch {
      return undefined;
    }
  }
}
