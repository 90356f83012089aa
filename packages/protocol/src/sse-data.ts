// What a proxy reads from the SSE `data:` payloads of a streamed answer, without building
// them. A proxy that checks every event (a worker sending garbage must not reach the client
// as a 200) and counts token events and usage used to run JSON.parse on each: about 3 us an
// event in the router, a fifth of its CPU on a short streamed answer. Two readers instead:
//   - `SseTemplate`, a stream's events in order: an event that is the stream's previous
//     event with only its token text changed is checked against it (two native string
//     comparisons and a pass over the token text, about 0.13 us against 1.2-1.6 us);
//   - `readSseData`, any one payload: validates it as JSON in one pass over the text and
//     reads only the members those checks look at:
//       - carries tokens: `text` or `output_ids` (SGLang /generate), a top-level `delta`
//         string (the Responses API), or a choice's `text`, or the `content` (else
//         `reasoning_content`) of its `delta` (else `message`);
//       - usage: `usage.prompt_tokens` (or `input_tokens`), `usage.completion_tokens` (or
//         `output_tokens`), `usage.prompt_tokens_details.cached_tokens` (or
//         `input_tokens_details`), over `meta_info`'s counts (usage.ts); a top-level
//         `response` (a Responses stream's closing event) is left to JSON.parse.
// Both answer only where they are sure. Anything else (a top-level value that is not an
// object, a member of interest given twice (JSON.parse keeps the last), an escaped member
// name, nesting deeper than MAX_DEPTH, whitespace JSON does not allow, or text that is not
// JSON at all) is "not decided", and the caller runs JSON.parse and usage.ts's readers, whose
// answer, and error, stand. So their answers are exactly those, and the property tests
// (test/sse-data.property.test.ts) hold them to it.

/** What `readSseData` found; the caller keeps one and passes it on every call. */
export class SseDataFacts {
  /** The event carries generated output (the router's inter-token histogram counts it). */
  tokens = false;
  /** As usage.ts's responseFacts: `usage` wins over `meta_info`; undefined when not given. */
  promptTokens: number | undefined = undefined;
  cachedTokens: number | undefined = undefined;
  outputTokens: number | undefined = undefined;
}

/** Nesting past this is left to JSON.parse (no engine nests a chunk this deep). */
export const MAX_DEPTH = 64;

// Where a value sits, for the members read (everything else is only validated).
const SKIP = 0;
const ROOT = 1;
const CHOICES = 2;
const CHOICE = 3;
const DELTA = 4;
const USAGE = 5;
const DETAILS = 6;
const META = 7;

// What a value was, for the members read.
const BAD = -1;
const NULL = 1;
const EMPTY_STRING = 2;
const STRING = 3;
const NUMBER = 4;
const EMPTY_ARRAY = 5;
const ARRAY = 6;
const OBJECT = 7;
const OTHER = 8;

// The scan's state: one scan at a time (it never yields).
class State {
  s = '';
  i = 0;
  end = 0;
  depth = 0;
  escaped = false;
  numStart = 0;
  numEnd = 0;
  carries = false;
  choicesCarry = false;
  metaPrompt: number | undefined = undefined;
  metaCached: number | undefined = undefined;
  metaOutput: number | undefined = undefined;
  usagePrompt: number | undefined = undefined;
  usageOutput: number | undefined = undefined;
  detailsCached: number | undefined = undefined;
  /** String values a stream varies from event to event (see SseTemplate), and the last one's span. */
  slots = 0;
  slotFrom = 0;
  slotTo = 0;
}
const S = new State();

/**
 * Reads `text[start, stop)`, an SSE data payload (what follows `data:` on its line), into
 * `out`. True: the payload is a JSON object and `out` holds what JSON.parse plus usage.ts's
 * readers would say of it. False: not decided; run those on the trimmed payload instead.
 */
export function readSseData(text: string, start: number, stop: number, out: SseDataFacts): boolean {
  S.s = text;
  S.i = start;
  S.end = stop;
  S.depth = 0;
  S.choicesCarry = false;
  S.carries = false;
  S.metaPrompt = S.metaCached = S.metaOutput = undefined;
  S.usagePrompt = S.usageOutput = S.detailsCached = undefined;
  S.slots = 0;
  skipSpace();
  if (S.i >= S.end || S.s.charCodeAt(S.i) !== 0x7b /* { */) return false;
  if (value(ROOT) !== OBJECT) return false;
  skipSpace();
  if (S.i !== S.end) return false;
  out.tokens = S.carries;
  out.promptTokens = S.usagePrompt ?? S.metaPrompt;
  out.cachedTokens = S.detailsCached ?? S.metaCached;
  out.outputTokens = S.usageOutput ?? S.metaOutput;
  return true;
}

function skipSpace(): void {
  const s = S.s;
  const end = S.end;
  let i = S.i;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  S.i = i;
}

/** A finite count from the last number, as usage.ts's `num` reads one. */
function count(kind: number): number | undefined {
  if (kind !== NUMBER) return undefined;
  const n = Number(S.s.slice(S.numStart, S.numEnd));
  return Number.isFinite(n) ? n : undefined;
}

function value(ctx: number): number {
  if (S.i >= S.end) return BAD;
  const c = S.s.charCodeAt(S.i);
  if (c === 0x7b) return object(ctx);
  if (c === 0x5b) return array(ctx);
  if (c === 0x22) return string();
  if (c === 0x2d || (c >= 0x30 && c <= 0x39)) return number();
  if (c === 0x74) return literal('true') ? OTHER : BAD;
  if (c === 0x66) return literal('false') ? OTHER : BAD;
  if (c === 0x6e) return literal('null') ? NULL : BAD;
  return BAD;
}

function literal(word: string): boolean {
  if (S.i + word.length > S.end || !S.s.startsWith(word, S.i)) return false;
  S.i += word.length;
  return true;
}

/** A string token; its text is never needed, only whether it is empty. */
function string(): number {
  const s = S.s;
  const end = S.end;
  let i = S.i + 1;
  const from = i;
  let escaped = false;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c === 0x22) {
      S.i = i + 1;
      S.escaped = escaped;
      return i === from ? EMPTY_STRING : STRING;
    }
    if (c < 0x20) return BAD;
    if (c === 0x5c) {
      escaped = true;
      const n = escapeLength(s, i, end);
      if (n === 0) return BAD;
      i += n;
      continue;
    }
    i++;
  }
  return BAD;
}

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x61 && c <= 0x66) || (c >= 0x41 && c <= 0x46);
}

function digits(): boolean {
  const s = S.s;
  const end = S.end;
  const from = S.i;
  let i = from;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) break;
    i++;
  }
  S.i = i;
  return i > from;
}

/** JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
function number(): number {
  S.numStart = S.i;
  if (S.s.charCodeAt(S.i) === 0x2d) S.i++;
  if (S.i >= S.end) return BAD;
  if (S.s.charCodeAt(S.i) === 0x30) S.i++;
  else if (!digits()) return BAD;
  if (S.i < S.end && S.s.charCodeAt(S.i) === 0x2e) {
    S.i++;
    if (!digits()) return BAD;
  }
  if (S.i < S.end && (S.s.charCodeAt(S.i) | 0x20) === 0x65) {
    S.i++;
    if (S.i < S.end && (S.s.charCodeAt(S.i) === 0x2b || S.s.charCodeAt(S.i) === 0x2d)) S.i++;
    if (!digits()) return BAD;
  }
  S.numEnd = S.i;
  return NUMBER;
}

function array(ctx: number): number {
  if (++S.depth > MAX_DEPTH) return BAD;
  S.i++;
  skipSpace();
  if (S.i < S.end && S.s.charCodeAt(S.i) === 0x5d) {
    S.i++;
    S.depth--;
    return EMPTY_ARRAY;
  }
  // A choice is an element of `choices`; what else an array holds is only validated.
  const inner = ctx === CHOICES ? CHOICE : SKIP;
  for (;;) {
    S.carries = false;
    const v = value(inner);
    if (v === BAD) return BAD;
    if (inner === CHOICE && v === OBJECT && S.carries) S.choicesCarry = true;
    skipSpace();
    if (S.i >= S.end) return BAD;
    const c = S.s.charCodeAt(S.i++);
    if (c === 0x5d) break;
    if (c !== 0x2c) return BAD;
    skipSpace();
  }
  S.depth--;
  return ARRAY;
}

// The members read, per place: a bit each, so a second one (JSON.parse keeps the last) is
// seen and the payload left to it.
const M_TEXT = 1;
const M_OUTPUT_IDS = 2;
const M_CHOICES = 4;
const M_USAGE = 8;
const M_META = 16;
const M_DELTA = 32;
const M_MESSAGE = 64;
const M_CONTENT = 128;
const M_REASONING = 256;
const M_PROMPT = 512;
const M_COMPLETION = 1024;
const M_DETAILS = 2048;
const M_CACHED = 4096;
/** The Responses API's top-level `delta` (an output delta's text). */
const M_ROOT_DELTA = 8192;
/** The Responses API's `response` (its closing event's usage): left to JSON.parse. */
const M_RESPONSE = 16384;

/** The members of interest in each place (indexed by context): name and bit. */
const MEMBERS: readonly (readonly [string, number])[][] = [
  /* SKIP */ [],
  /* ROOT */ [
    ['text', M_TEXT],
    ['choices', M_CHOICES],
    ['usage', M_USAGE],
    ['meta_info', M_META],
    ['output_ids', M_OUTPUT_IDS],
    ['delta', M_ROOT_DELTA],
    ['response', M_RESPONSE],
  ],
  /* CHOICES */ [],
  /* CHOICE */ [
    ['delta', M_DELTA],
    ['text', M_TEXT],
    ['message', M_MESSAGE],
  ],
  /* DELTA */ [
    ['content', M_CONTENT],
    ['reasoning_content', M_REASONING],
  ],
  /* USAGE */ [
    ['prompt_tokens', M_PROMPT],
    ['completion_tokens', M_COMPLETION],
    ['prompt_tokens_details', M_DETAILS],
    // The Responses API's names: one bit with the chat names, so a usage giving both is
    // "given twice" and left to JSON.parse (usage.ts prefers the chat names).
    ['input_tokens', M_PROMPT],
    ['output_tokens', M_COMPLETION],
    ['input_tokens_details', M_DETAILS],
  ],
  /* DETAILS */ [['cached_tokens', M_CACHED]],
  /* META */ [
    ['prompt_tokens', M_PROMPT],
    ['cached_tokens', M_CACHED],
    ['completion_tokens', M_COMPLETION],
  ],
];

/** Which member of interest `S.s[from, to)` names in `ctx`, as a bit; 0 for any other. */
function member(ctx: number, from: number, to: number): number {
  const list = MEMBERS[ctx]!;
  const n = to - from;
  for (let k = 0; k < list.length; k++) {
    const [name, bit] = list[k]!;
    if (name.length === n && S.s.startsWith(name, from)) return bit;
  }
  return 0;
}

/** Where a member's value sits. */
function childContext(m: number): number {
  switch (m) {
    case M_CHOICES:
      return CHOICES;
    case M_DELTA:
    case M_MESSAGE:
      return DELTA;
    case M_USAGE:
      return USAGE;
    case M_META:
      return META;
    case M_DETAILS:
      return DETAILS;
    default:
      return SKIP;
  }
}

function object(ctx: number): number {
  if (++S.depth > MAX_DEPTH) return BAD;
  S.i++;
  let seen = 0;
  // A choice: its text, and what its delta (else message) says; a delta: its content, else
  // its reasoning content. Kinds as `value` returns them; 0 = absent.
  let text = 0;
  let delta = 0;
  let deltaCarries = false;
  let messageCarries = false;
  let content = 0;
  let reasoning = 0;
  let outputIds = 0;
  let rootDelta = 0;
  let choices = 0;
  skipSpace();
  if (S.i < S.end && S.s.charCodeAt(S.i) === 0x7d) {
    S.i++;
  } else {
    for (;;) {
      if (S.i >= S.end || S.s.charCodeAt(S.i) !== 0x22) return BAD;
      const keyFrom = S.i + 1;
      const k = string();
      if (k === BAD) return BAD;
      const keyTo = S.i - 1;
      // A member named with an escape could be one of interest: JSON.parse decides.
      if (S.escaped && ctx !== SKIP) return BAD;
      const m = ctx === SKIP ? 0 : member(ctx, keyFrom, keyTo);
      // A closing event's `response` holds usage only when there is no top-level one: rare
      // (once a stream), so JSON.parse and usage.ts decide.
      if (m === M_RESPONSE) return BAD;
      if (m !== 0) {
        if ((seen & m) !== 0) return BAD;
        seen |= m;
      }
      skipSpace();
      if (S.i >= S.end || S.s.charCodeAt(S.i) !== 0x3a) return BAD;
      S.i++;
      skipSpace();
      S.carries = false;
      const at = S.i;
      const v = value(childContext(m));
      if (v === BAD) return BAD;
      // A delta's content or reasoning, a choice's or /generate's text: the string a stream's
      // events vary (SseTemplate).
      if (
        (v === STRING || v === EMPTY_STRING) &&
        (m === M_CONTENT || m === M_REASONING || m === M_TEXT || m === M_ROOT_DELTA)
      ) {
        S.slots++;
        S.slotFrom = at + 1;
        S.slotTo = S.i - 1;
      }
      switch (m) {
        case 0:
          break;
        case M_TEXT:
          text = v;
          break;
        case M_OUTPUT_IDS:
          outputIds = v;
          break;
        case M_ROOT_DELTA:
          rootDelta = v;
          break;
        case M_CHOICES:
          choices = v;
          break;
        case M_DELTA:
          delta = v;
          deltaCarries = v === OBJECT && S.carries;
          break;
        case M_MESSAGE:
          messageCarries = v === OBJECT && S.carries;
          break;
        case M_CONTENT:
          content = v;
          break;
        case M_REASONING:
          reasoning = v;
          break;
        case M_PROMPT:
          if (ctx === USAGE) S.usagePrompt = count(v);
          else S.metaPrompt = count(v);
          break;
        case M_COMPLETION:
          if (ctx === USAGE) S.usageOutput = count(v);
          else S.metaOutput = count(v);
          break;
        case M_CACHED:
          if (ctx === DETAILS) S.detailsCached = count(v);
          else S.metaCached = count(v);
          break;
        default:
          break;
      }
      skipSpace();
      if (S.i >= S.end) return BAD;
      const c = S.s.charCodeAt(S.i++);
      if (c === 0x7d) break;
      if (c !== 0x2c) return BAD;
      skipSpace();
    }
  }
  S.depth--;
  switch (ctx) {
    case ROOT:
      // carriesTokens: a non-empty text, a non-empty output_ids, or a choice that S.carries.
      S.carries =
        text === STRING ||
        outputIds === ARRAY ||
        rootDelta === STRING ||
        (choices === ARRAY && S.choicesCarry);
      break;
    case CHOICE: {
      // `delta ?? message`: a delta that is absent or null gives way to the message.
      const fromDelta = delta !== 0 && delta !== NULL;
      S.carries = text === STRING || (fromDelta ? deltaCarries : messageCarries);
      break;
    }
    case DELTA:
      // `content ?? reasoning_content`, a non-empty string.
      S.carries = content !== 0 && content !== NULL ? content === STRING : reasoning === STRING;
      break;
    default:
      S.carries = false;
  }
  return OBJECT;
}

/**
 * A stream's events differ from one another in one string: the token text (a delta's content
 * or reasoning, a completion choice's text). `SseTemplate` keeps the text around that string
 * from the last event `readSseData` read with exactly one such string, and what that event
 * says with the string empty and with it not. An event that is the same text around a valid
 * JSON string body is the same JSON but for that string, so it says the same, which is
 * checked with two comparisons and a pass over the string instead of reading the whole
 * event. Anything else is read by `readSseData` (and, through it, left to JSON.parse), and
 * may become the template; after MAX_LEARN templates a stream keeps its last.
 */
export class SseTemplate {
  static readonly MAX_LEARN = 4;
  /** The payload up to and including the string's opening quote; '' until one is learned. */
  private prefix = '';
  /** From the string's closing quote to the payload's end. */
  private suffix = '';
  private learned = 0;
  /** Events read from the template, not read whole (what the tests and a profile look at). */
  hits = 0;
  private readonly ifEmpty = new SseDataFacts();
  private readonly ifNot = new SseDataFacts();

  /** As `readSseData`, for events of one stream in order. */
  read(text: string, start: number, stop: number, out: SseDataFacts): boolean {
    const p = this.prefix;
    if (p !== '') {
      const q = this.suffix;
      const from = start + p.length;
      const to = stop - q.length;
      // slice and === compare natively; startsWith walks a character at a time (ten times
      // slower on a 120-character prefix).
      if (
        to >= from &&
        text.slice(start, from) === p &&
        text.slice(to, stop) === q &&
        stringBody(text, from, to)
      ) {
        this.hits++;
        const f = to === from ? this.ifEmpty : this.ifNot;
        out.tokens = f.tokens;
        out.promptTokens = f.promptTokens;
        out.cachedTokens = f.cachedTokens;
        out.outputTokens = f.outputTokens;
        return true;
      }
    }
    if (!readSseData(text, start, stop, out)) return false;
    if (S.slots === 1 && this.learned < SseTemplate.MAX_LEARN) this.learn(text, start, stop);
    return true;
  }

  private learn(text: string, start: number, stop: number): void {
    this.learned++;
    const p = text.slice(start, S.slotFrom);
    const q = text.slice(S.slotTo, stop);
    // What the event says with its string empty, and with it not: read again, not assumed.
    const empty = p + q;
    const full = `${p}x${q}`;
    if (
      readSseData(empty, 0, empty.length, this.ifEmpty) &&
      readSseData(full, 0, full.length, this.ifNot)
    ) {
      this.prefix = p;
      this.suffix = q;
    } else {
      this.prefix = '';
    }
  }
}

/** Whether text[from, to) is the inside of a JSON string: no quote, no control character, valid escapes. */
function stringBody(text: string, from: number, to: number): boolean {
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22 || c < 0x20) return false;
    if (c !== 0x5c) continue;
    const n = escapeLength(text, i, to);
    if (n === 0) return false;
    i += n - 1;
  }
  return true;
}

/**
 * The length of the JSON escape whose backslash is at text[i], ending by `end`: 2 for \" \\ \/
 * \b \f \n \r \t, 6 for \uXXXX; 0 when it is not one.
 */
function escapeLength(text: string, i: number, end: number): number {
  if (i + 1 >= end) return 0;
  const e = text.charCodeAt(i + 1);
  if (e === 0x75 /* u */) {
    if (i + 6 > end) return 0;
    for (let k = i + 2; k < i + 6; k++) if (!isHex(text.charCodeAt(k))) return 0;
    return 6;
  }
  // " \ / b f n r t
  return e === 0x22 ||
    e === 0x5c ||
    e === 0x2f ||
    e === 0x62 ||
    e === 0x66 ||
    e === 0x6e ||
    e === 0x72 ||
    e === 0x74
    ? 2
    : 0;
}
