// W3C Trace Context on the upstream hop, and optional OpenTelemetry spans.
//
// Every request forwarded to a worker carries a `traceparent`: the client's trace id when it
// sent a valid one (so the worker's spans join the client's trace), else a fresh one; each
// upstream attempt gets its own span id, since each is a separate hop. An invalid traceparent
// is replaced, and its `tracestate` dropped with it, as the spec asks of intermediaries.
//
// With --otel the router also records four spans per request through @opentelemetry/api:
// kvroute.received (the whole request, arrival to done), and under it kvroute.routed (the
// policy decision), kvroute.upstream_first_byte (forward to the worker's first byte: queueing
// and prefill on the worker) and kvroute.done (first byte to the end of the answer). They go
// to whatever tracer provider the process registered (an OpenTelemetry SDK loaded with
// `node --import`, or an embedder's). Off by default, and off means no OTel call at all.
import { randomFillSync } from 'node:crypto';
import {
  type Context,
  context as otelContext,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type Tracer,
  trace,
} from '@opentelemetry/api';

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-|$)/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);

/** A parsed, valid incoming traceparent. */
export interface TraceParent {
  traceId: string;
  parentId: string;
  flags: string;
}

/**
 * The traceparent header if it is valid W3C Trace Context, else undefined. Version ff is
 * invalid; version 00 must be exactly 55 characters; a later version may append fields.
 */
export function parseTraceparent(header: string | string[] | undefined): TraceParent | undefined {
  if (typeof header !== 'string') return undefined;
  const m = TRACEPARENT.exec(header);
  if (!m) return undefined;
  const [, version, traceId, parentId, flags, more] = m;
  if (version === 'ff' || traceId === ZERO_TRACE || parentId === ZERO_SPAN) return undefined;
  if (version === '00' && more !== '') return undefined;
  return { traceId: traceId!, parentId: parentId!, flags: flags! };
}

// Random ids from a refilled pool: one crypto call per 512 ids instead of one per id.
const pool = Buffer.alloc(4096);
let poolAt = pool.length;
function randomHex(bytes: number): string {
  if (poolAt + bytes > pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const hex = pool.toString('hex', poolAt, poolAt + bytes);
  poolAt += bytes;
  return hex;
}

export function newTraceId(): string {
  const id = randomHex(16);
  return id === ZERO_TRACE ? newTraceId() : id;
}

export function newSpanId(): string {
  const id = randomHex(8);
  return id === ZERO_SPAN ? newSpanId() : id;
}

export function formatTraceparent(traceId: string, spanId: string, flags: string): string {
  return `00-${traceId}-${spanId}-${flags}`;
}

/** One request's trace: its id, and (with --otel) its spans. */
export class RequestTrace {
  readonly traceId: string;
  readonly flags: string;
  /** Whether the client's traceparent was valid (its tracestate may then pass on). */
  readonly continued: boolean;
  private root: Span | undefined;
  private rootCtx: Context | undefined;
  private upstream: Span | undefined;
  private delivery: Span | undefined;

  constructor(
    incoming: string | string[] | undefined,
    private readonly tracer: Tracer | undefined,
    route: string,
  ) {
    const parent = parseTraceparent(incoming);
    this.continued = parent !== undefined;
    this.traceId = parent?.traceId ?? newTraceId();
    // A trace the router starts is sampled: the worker may record it.
    this.flags = parent?.flags ?? '01';
    if (tracer) {
      const parentCtx = trace.setSpanContext(ROOT_CONTEXT, {
        traceId: this.traceId,
        // Without a client parent the router's root span has no parent but keeps this trace id.
        spanId: parent?.parentId ?? newSpanId(),
        traceFlags: Number.parseInt(this.flags, 16),
        isRemote: true,
      });
      this.root = tracer.startSpan(
        'kvroute.received',
        { kind: SpanKind.SERVER, attributes: { 'http.route': route } },
        parentCtx,
      );
      this.rootCtx = trace.setSpan(otelContext.active(), this.root);
    }
  }

  /** The policy chose a rank: records kvroute.routed over the decision's time span. */
  routed(rank: number, reason: string, startMs: number, endMs: number): void {
    if (!this.tracer) return;
    const attributes = { 'kvroute.rank': rank, 'kvroute.reason': reason };
    this.root!.setAttributes(attributes);
    this.tracer
      .startSpan('kvroute.routed', { attributes, startTime: startMs }, this.rootCtx)
      .end(endMs);
  }

  /**
   * The traceparent for one upstream attempt: a new span id per hop (with --otel, the
   * kvroute.upstream_first_byte span's, so the worker's span is its child).
   */
  upstreamHop(rank: number, reason: string, worker: string): string {
    if (this.tracer) {
      // A retry: the previous attempt's spans end here.
      this.upstream?.end();
      this.delivery?.end();
      this.delivery = undefined;
      const span = this.tracer.startSpan(
        'kvroute.upstream_first_byte',
        {
          kind: SpanKind.CLIENT,
          attributes: { 'kvroute.rank': rank, 'kvroute.reason': reason, 'kvroute.worker': worker },
        },
        this.rootCtx,
      );
      this.upstream = span;
      const sc = span.spanContext();
      if (sc.traceId === this.traceId) return formatTraceparent(sc.traceId, sc.spanId, this.flags);
    }
    return formatTraceparent(this.traceId, newSpanId(), this.flags);
  }

  /** The worker's first body byte arrived: the answer's delivery starts. */
  firstByte(rank: number, reason: string): void {
    if (!this.tracer) return;
    this.upstream?.end();
    this.upstream = undefined;
    this.delivery = this.tracer.startSpan(
      'kvroute.done',
      { attributes: { 'kvroute.rank': rank, 'kvroute.reason': reason } },
      this.rootCtx,
    );
  }

  /** The request is over, with the status the client got (499: it went away). */
  end(status: string): void {
    if (!this.tracer) return;
    const code = Number(status);
    const error = code >= 500 || Number.isNaN(code);
    for (const span of [this.upstream, this.delivery, this.root]) {
      if (!span) continue;
      if (error) span.setStatus({ code: SpanStatusCode.ERROR, message: `status ${status}` });
      span.setAttribute('http.response.status_code', code);
      span.end();
    }
    this.upstream = this.delivery = this.root = undefined;
  }
}
