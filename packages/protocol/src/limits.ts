// Bounds on what a client may ask for, checked while parsing so nothing unbounded reaches load
// accounting, the tokenizer or a recursive walk. Output-token limits must be finite integers no
// larger than the model's context (a client sending 1.8e308 as max_tokens once left a router's
// in-flight token totals at +Infinity), and JSON nesting is capped (a body nested thousands of
// levels deep inside tools or tool_calls overflowed the stack of code that walks it).
import { badRequest } from './errors.ts';

export interface RequestLimits {
  /**
   * Largest output-token limit a request may ask for (max_tokens, max_completion_tokens,
   * sampling_params.max_new_tokens): the model's context length where it is known.
   */
  maxOutputTokens: number;
  /** Deepest nesting of arrays and objects in a request body; the body itself is depth 1. */
  maxJsonDepth: number;
}

/**
 * Used when the host knows nothing better: no model serves more than 2^20 tokens of context
 * today, and 64 levels of nesting is far beyond any tool schema seen in practice.
 */
export const DEFAULT_LIMITS: Readonly<RequestLimits> = {
  maxOutputTokens: 1 << 20,
  maxJsonDepth: 64,
};

/**
 * An optional output-token limit: undefined when absent or null, else an integer in
 * [min, limits.maxOutputTokens]; a 400 naming `param` otherwise.
 */
export function checkOutputTokens(
  value: unknown,
  param: string,
  min: number,
  limits: RequestLimits = DEFAULT_LIMITS,
): number | undefined {
  if (value === undefined || value === null) return undefined;
  // An integer past 2^53 (1e300, 9007199254740993) is an integer too: what is wrong with it
  // is its size, so it gets the bound's message, not "must be an integer".
  if (typeof value === 'number' && Number.isInteger(value) && value > limits.maxOutputTokens) {
    throw badRequest(
      `'${param}' must be at most ${limits.maxOutputTokens} (the model's context length), got ${value}`,
      { param, code: 'invalid_value' },
    );
  }
  if (typeof value !== 'number' || !Number.isSafeInteger(value)) {
    throw badRequest(`'${param}' must be an integer, got ${describeNumber(value)}`, {
      param,
      code: 'invalid_type',
    });
  }
  if (value < min) {
    throw badRequest(`'${param}' must be at least ${min}, got ${value}`, {
      param,
      code: 'invalid_value',
    });
  }
  if (value > limits.maxOutputTokens) {
    throw badRequest(
      `'${param}' must be at most ${limits.maxOutputTokens} (the model's context length), got ${value}`,
      { param, code: 'invalid_value' },
    );
  }
  return value;
}

/**
 * Throws a 400 naming the deepest path that passes `maxDepth` levels of nesting. Iterative, so
 * the check itself cannot overflow the stack however deep the value is.
 */
export function checkJsonDepth(
  value: unknown,
  maxDepth: number = DEFAULT_LIMITS.maxJsonDepth,
): void {
  if (typeof value !== 'object' || value === null) return;
  // Parallel stacks of containers and their depths; most bodies are a few levels deep.
  const stack: object[] = [value];
  const depths: number[] = [1];
  while (stack.length > 0) {
    const v = stack.pop()!;
    const d = depths.pop()!;
    if (d > maxDepth) {
      throw badRequest(
        `JSON nesting in '${pathTo(value, v, maxDepth)}' is deeper than ${maxDepth} levels`,
        { param: pathTo(value, v, maxDepth), code: 'nesting_too_deep' },
      );
    }
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const c = v[i];
        if (typeof c === 'object' && c !== null) {
          stack.push(c);
          depths.push(d + 1);
        }
      }
    } else {
      const o = v as Record<string, unknown>;
      for (const k in o) {
        const c = o[k];
        if (typeof c === 'object' && c !== null) {
          stack.push(c);
          depths.push(d + 1);
        }
      }
    }
  }
}

/** The path from `root` to `target` (found within `maxDepth` + 1 levels), e.g. `tools[0].x`. */
function pathTo(root: object, target: object, maxDepth: number): string {
  const walk = (v: unknown, path: string, depth: number): string | undefined => {
    if (v === target) return path;
    if (typeof v !== 'object' || v === null || depth > maxDepth) return undefined;
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) {
        const found = walk(v[i], `${path}[${i}]`, depth + 1);
        if (found !== undefined) return found;
      }
      return undefined;
    }
    for (const k in v as Record<string, unknown>) {
      const found = walk((v as Record<string, unknown>)[k], path ? `${path}.${k}` : k, depth + 1);
      if (found !== undefined) return found;
    }
    return undefined;
  };
  return walk(root, '', 1) || 'body';
}

function describeNumber(v: unknown): string {
  if (typeof v === 'string') return `a string (${JSON.stringify(v.slice(0, 40))})`;
  if (v === null || typeof v !== 'object') return `${typeof v} ${String(v)}`;
  return Array.isArray(v) ? 'an array' : 'an object';
}
