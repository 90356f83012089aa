// A run's request records as columns: one Float64Array per numeric field, the strings by
// reference. A RequestRecord object with its four boxed times takes ~200 bytes; a row here
// ~100, and it is not one more object for the collector to walk: on the Mooncake trace ten
// times over, the records were the largest thing a run kept. Numbers are kept exactly (a
// Float64Array holds any JS number), so a record read back equals the one pushed.
import type { RequestRecord } from './types.ts';

/** The numeric fields, in RequestRecord's order. */
const NUMERIC = [
  'id',
  'clientId',
  'arrivalMs',
  'rank',
  'inputTokens',
  'cachedTokens',
  'outputTokens',
  'queueMs',
  'ttftMs',
  'endMs',
  'retries',
] as const;

export type NumericField = (typeof NUMERIC)[number];

/** Each numeric field's place in NUMERIC (and so its column). */
const COLUMN = Object.fromEntries(NUMERIC.map((f, k) => [f, k])) as Record<NumericField, number>;

export class RecordColumns {
  length = 0;
  private capacity = 1024;
  /** cols[k] holds field NUMERIC[k]. */
  private cols = NUMERIC.map(() => new Float64Array(1024));
  private sessionKeys: string[] = [];
  private reasons: string[] = [];
  /** Only once some record has a tenant. */
  private tenants: (string | undefined)[] | undefined;

  /** Columns of these records (a copy: the array may change after). */
  static of(records: readonly RequestRecord[] | RecordColumns): RecordColumns {
    if (records instanceof RecordColumns) return records;
    const c = new RecordColumns();
    for (const r of records) c.push(r);
    return c;
  }

  push(r: RequestRecord): void {
    const i = this.length;
    if (i === this.capacity) this.grow();
    for (let k = 0; k < NUMERIC.length; k++) this.cols[k]![i] = r[NUMERIC[k]!];
    this.sessionKeys.push(r.sessionKey);
    this.reasons.push(r.reason);
    if (r.tenant !== undefined) this.tenants ??= new Array<string | undefined>(i).fill(undefined);
    this.tenants?.push(r.tenant);
    this.length = i + 1;
  }

  private grow(): void {
    this.capacity *= 2;
    this.cols = this.cols.map((col) => {
      const next = new Float64Array(this.capacity);
      next.set(col);
      return next;
    });
  }

  /** Field `f` of every record, in push order (a view: valid until the next push). */
  column(f: NumericField): Float64Array {
    return this.cols[COLUMN[f]]!.subarray(0, this.length);
  }

  /** Record i as pushed: the same fields in the same order. */
  get(i: number): RequestRecord {
    const n = (f: NumericField) => this.cols[COLUMN[f]]![i]!;
    const tenant = this.tenants?.[i];
    return {
      id: n('id'),
      clientId: n('clientId'),
      sessionKey: this.sessionKeys[i]!,
      ...(tenant !== undefined ? { tenant } : {}),
      arrivalMs: n('arrivalMs'),
      rank: n('rank'),
      reason: this.reasons[i]!,
      inputTokens: n('inputTokens'),
      cachedTokens: n('cachedTokens'),
      outputTokens: n('outputTokens'),
      queueMs: n('queueMs'),
      ttftMs: n('ttftMs'),
      endMs: n('endMs'),
      retries: n('retries'),
    };
  }

  toArray(): RequestRecord[] {
    return Array.from({ length: this.length }, (_, i) => this.get(i));
  }
}
