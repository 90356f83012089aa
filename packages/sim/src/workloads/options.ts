// Scenario options come from CLI flags and YAML as strings or numbers; these readers accept
// both and fail with the option's name and the scenario's.

export class WorkloadOptionError extends Error {
  readonly code = 'WORKLOAD_OPTION';
}

/** A numeric option (numeric strings accepted) that passes `ok`, else an error saying `must`. */
function optNumeric(
  scenario: string,
  o: Record<string, unknown>,
  key: string,
  ok: (v: number) => boolean,
  must: string,
): number {
  const raw = o[key];
  const v = typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : raw;
  if (typeof v !== 'number' || !ok(v)) {
    throw new WorkloadOptionError(
      `${scenario}: ${key} must be ${must}, got ${JSON.stringify(raw)}`,
    );
  }
  return v;
}

export function optInt(
  scenario: string,
  o: Record<string, unknown>,
  key: string,
  min: number,
): number {
  return optNumeric(
    scenario,
    o,
    key,
    (v) => Number.isInteger(v) && v >= min,
    `an integer >= ${min}`,
  );
}

export function optNum(
  scenario: string,
  o: Record<string, unknown>,
  key: string,
  min: number,
): number {
  return optNumeric(scenario, o, key, (v) => Number.isFinite(v) && v >= min, `a number >= ${min}`);
}

/** A number > 0 (a rate, a speed-up): 0 would never send anything or never end. */
export function optPositive(scenario: string, o: Record<string, unknown>, key: string): number {
  return optNumeric(scenario, o, key, (v) => Number.isFinite(v) && v > 0, 'a number > 0');
}

export function optBool(scenario: string, o: Record<string, unknown>, key: string): boolean {
  const raw = o[key];
  if (raw === true || raw === 'true' || raw === '1' || raw === 1) return true;
  if (raw === false || raw === 'false' || raw === '0' || raw === 0) return false;
  throw new WorkloadOptionError(
    `${scenario}: ${key} must be true or false, got ${JSON.stringify(raw)}`,
  );
}

export function optRange(
  scenario: string,
  o: Record<string, unknown>,
  minKey: string,
  maxKey: string,
  min: number,
): [number, number] {
  const lo = optInt(scenario, o, minKey, min);
  const hi = optInt(scenario, o, maxKey, min);
  if (hi < lo) {
    throw new WorkloadOptionError(`${scenario}: ${maxKey} (${hi}) must be >= ${minKey} (${lo})`);
  }
  return [lo, hi];
}
