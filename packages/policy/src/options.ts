// Reading numbers out of plain config objects. CLI flags and YAML give strings or numbers,
// so numeric strings are accepted; anything else is a RangeError naming the field.
import { PolicyRangeError } from './errors.ts';

function describe(value: unknown): string {
  return typeof value === 'string' ? `'${value}'` : String(value);
}

/** An integer option >= `min` (and <= `max`), or `fallback` when absent. */
export function readInt(
  owner: string,
  options: Record<string, unknown>,
  field: string,
  fallback: number,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const raw = options[field];
  if (raw === undefined || raw === null) return fallback;
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : raw;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    const bound = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `in [${min}, ${max}]`;
    throw new PolicyRangeError(
      field,
      `${owner}: ${field} must be an integer ${bound}, got ${describe(raw)}`,
    );
  }
  return value;
}

/** A finite number option >= `min`, or `fallback` when absent. */
export function readNumber(
  owner: string,
  options: Record<string, unknown>,
  field: string,
  fallback: number,
  min: number,
): number {
  const raw = options[field];
  if (raw === undefined || raw === null) return fallback;
  const value = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : raw;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min) {
    throw new PolicyRangeError(
      field,
      `${owner}: ${field} must be a number >= ${min}, got ${describe(raw)}`,
    );
  }
  return value;
}
