// What a worker's response says about the request, in the three shapes kvroute meets:
// SGLang's native /generate (`meta_info` on every chunk, cumulative), OpenAI's and vLLM's
// (`usage` on the final chunk or the whole body, cached tokens under
// `usage.prompt_tokens_details.cached_tokens`), and SGLang's OpenAI endpoints (the OpenAI
// shape). One reader for the router's accounting, validate's measurements and the tests.
// Where a body carries both, `usage` wins: it is the final, authoritative count.
import { SSE_DONE_DATA, SseReader } from './sse.ts';

/** Facts read from one response object (a stream chunk or a whole body). */
export interface ResponseFacts {
  /** The object carries generated output (text, ids, a content or reasoning delta). */
  content: boolean;
  /** The `error` member's message, if any. */
  error?: string | undefined;
  promptTokens?: number | undefined;
  cachedTokens?: number | undefined;
  outputTokens?: number | undefined;
  /** SGLang's `meta_info.dp_rank`. */
  rank?: number | undefined;
}

/**
 * Prompt, cached and output tokens as the worker counted them. A worker that does not report
 * cached tokens (vLLM without prefix caching stats, an older server) leaves `cachedTokens`
 * undefined: absent is not 0, or a hit-rate computed from it would read as a 0% hit rate.
 */
export interface ReportedUsage {
  promptTokens: number;
  cachedTokens?: number | undefined;
  outputTokens?: number | undefined;
}

function num(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

function obj(v: unknown): Record<string, unknown> | undefined {
  return typeof v === 'object' && v !== null ? (v as Record<string, unknown>) : undefined;
}

function errorMessage(v: unknown): string | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === 'string') return v;
  if (typeof v === 'object' && typeof (v as { message?: unknown }).message === 'string') {
    return (v as { message: string }).message;
  }
  return JSON.stringify(v);
}

const nonEmpty = (v: unknown): boolean => typeof v === 'string' && v.length > 0;

/**
 * ResponseFacts and ReportedUsage are made by constructors, never as object literals that
 * grow field by field. V8 gives a literal's hidden class a transition from a root class
 * shared by every literal with as many fields in the program, and such a root holds at most
 * ~1,500 transitions. A large program (the router's bundle, with its libraries) uses them up;
 * a literal with field names new to V8 then gets a hidden class outside the transition tree,
 * and each field added later, or each field whose kind of value changes, makes a new hidden
 * class on every call (about 1.4 us each, and every later read of the object misses its inline
 * cache). A class has its own root. Measured: usageFromObject was 4 us of the router's CPU per
 * request, a new hidden class per field per response.
 */
class Facts implements ResponseFacts {
  content = false;
  error: string | undefined = undefined;
  promptTokens: number | undefined = undefined;
  cachedTokens: number | undefined = undefined;
  outputTokens: number | undefined = undefined;
  rank: number | undefined = undefined;
}

class Usage implements ReportedUsage {
  constructor(
    public promptTokens: number,
    public cachedTokens: number | undefined,
    public outputTokens: number | undefined,
  ) {}
}

/** Reads what a streamed chunk or a whole JSON response body says, in any of the shapes. */
export function responseFacts(value: unknown): ResponseFacts {
  const facts = new Facts();
  const o = obj(value);
  if (!o) return facts;
  facts.error = errorMessage(o.error);
  const meta = obj(o.meta_info);
  if (meta) {
    facts.promptTokens = num(meta.prompt_tokens);
    facts.cachedTokens = num(meta.cached_tokens);
    facts.outputTokens = num(meta.completion_tokens);
    facts.rank = num(meta.dp_rank);
    if ((facts.outputTokens ?? 0) > 0) facts.content = true;
  }
  if (nonEmpty(o.text)) facts.content = true;
  if (Array.isArray(o.output_ids) && o.output_ids.length > 0) facts.content = true;
  // OpenAI: choices[].text (completions) or choices[].delta.content / message.content (chat).
  if (Array.isArray(o.choices)) {
    for (const item of o.choices) {
      const c = obj(item);
      if (!c) continue;
      if (nonEmpty(c.text)) facts.content = true;
      const d = obj(c.delta ?? c.message);
      if (d && (nonEmpty(d.content) || nonEmpty(d.reasoning_content))) facts.content = true;
    }
  }
  // OpenAI's Responses API: a stream's output deltas carry their text in a top-level `delta`
  // (`response.output_text.delta` and the like).
  if (nonEmpty(o.delta)) facts.content = true;
  // Its counts are named input/output, and a stream's closing event holds them in `response`.
  const usage = obj(o.usage) ?? obj(obj(o.response)?.usage);
  if (usage) {
    facts.promptTokens = num(usage.prompt_tokens) ?? num(usage.input_tokens) ?? facts.promptTokens;
    facts.outputTokens =
      num(usage.completion_tokens) ?? num(usage.output_tokens) ?? facts.outputTokens;
    const details = obj(usage.prompt_tokens_details) ?? obj(usage.input_tokens_details);
    if (details) facts.cachedTokens = num(details.cached_tokens) ?? facts.cachedTokens;
  }
  return facts;
}

/**
 * Whether a parsed SSE event carries generated output: a non-empty text, delta or output ids
 * (a role-only, usage-only or empty chunk does not), checked without building anything.
 */
export function carriesTokens(value: unknown): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const o = value as Record<string, unknown>;
  if (typeof o.text === 'string' && o.text.length > 0) return true;
  if (Array.isArray(o.output_ids) && o.output_ids.length > 0) return true;
  if (typeof o.delta === 'string' && o.delta.length > 0) return true;
  const choices = o.choices;
  if (!Array.isArray(choices)) return false;
  for (const c of choices) {
    if (typeof c !== 'object' || c === null) continue;
    const ch = c as Record<string, unknown>;
    if (typeof ch.text === 'string' && ch.text.length > 0) return true;
    const d = (ch.delta ?? ch.message) as Record<string, unknown> | undefined;
    if (typeof d !== 'object' || d === null) continue;
    const content = d.content ?? d.reasoning_content;
    if (typeof content === 'string' && content.length > 0) return true;
  }
  return false;
}

/**
 * Prompt, cached and output tokens of a response object; undefined when it reports no prompt
 * count. Counts the worker did not report are undefined, never turned into 0.
 */
export function usageFromObject(value: unknown): ReportedUsage | undefined {
  const f = responseFacts(value);
  return reportedUsage(f.promptTokens, f.cachedTokens, f.outputTokens);
}

/** The usage of these counts; undefined without a prompt count (as usageFromObject). */
export function reportedUsage(
  promptTokens: number | undefined,
  cachedTokens: number | undefined,
  outputTokens: number | undefined,
): ReportedUsage | undefined {
  if (promptTokens === undefined) return undefined;
  return new Usage(promptTokens, cachedTokens, outputTokens);
}

const JSON_COPY_CAP = 4 * 1024 * 1024;

/**
 * Reads the worker-reported usage out of a response while it is being piped on, without
 * holding the stream back. SSE: only the last event that mentions prompt tokens is kept
 * (the final chunk carries usage; /generate repeats meta_info in every chunk) and parsed
 * once at the end. Plain JSON: the chunks are kept up to a cap and parsed at the end.
 */
export class UsageScanner {
  private readonly reader: SseReader | undefined;
  private lastUsageData: string | undefined;
  // Plain JSON: the chunks themselves (the response holds on to them while they are written
  // anyway), decoded once at the end.
  private copy: Buffer[] | undefined;
  private copyBytes = 0;

  constructor(readonly sse: boolean) {
    if (sse) {
      this.reader = new SseReader(
        (data) => {
          if (
            data !== SSE_DONE_DATA &&
            (data.includes('"prompt_tokens"') || data.includes('"input_tokens"'))
          ) {
            this.lastUsageData = data;
          }
        },
        // A usage event is small; a runaway event stops the scan, not the response.
        { maxEventChars: JSON_COPY_CAP, onOverflow: () => {} },
      );
    } else this.copy = [];
  }

  push(chunk: Buffer): void {
    if (this.reader) {
      this.reader.push(chunk);
      return;
    }
    if (this.copy && this.copyBytes + chunk.length <= JSON_COPY_CAP) {
      this.copy.push(chunk);
      this.copyBytes += chunk.length;
    } else {
      this.copy = undefined;
    }
  }

  result(): ReportedUsage | undefined {
    try {
      if (this.reader) {
        this.reader.end();
        return this.lastUsageData === undefined
          ? undefined
          : usageFromObject(JSON.parse(this.lastUsageData));
      }
      if (!this.copy) return undefined;
      const bytes =
        this.copy.length === 1 ? this.copy[0]! : Buffer.concat(this.copy, this.copyBytes);
      return usageFromObject(JSON.parse(bytes.toString('utf8')));
    } catch {
      return undefined;
    }
  }
}
