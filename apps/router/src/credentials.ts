// Worker URLs may carry credentials (http://user:password@host). They are needed to reach the
// worker and nowhere else: every log line, the startup line's config and ranks, and the admin
// answers show such a URL with its user information replaced. Metric labels never carry it
// (router.ts writes their own form of the URL).

const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)[^\s/?#@"'<>]+@/gi;

/** `text` with the user information of every URL in it replaced by `<redacted>`. */
export function redactUrlCredentials(text: string): string {
  return text.includes('@') ? text.replace(USERINFO, '$1<redacted>@') : text;
}

/**
 * A copy of `value` with every string run through redactUrlCredentials: plain objects and
 * arrays are walked (to a bounded depth), anything else (errors, buffers, class instances) is
 * returned as it is. Untouched values are returned as they are, not copied.
 */
export function redactCredentials<T>(value: T, depth = 8): T {
  if (typeof value === 'string') return redactUrlCredentials(value) as T;
  if (depth === 0 || value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    let out: unknown[] | undefined;
    value.forEach((v, i) => {
      const r = redactCredentials(v, depth - 1);
      if (r === v) return;
      out ??= [...value];
      out[i] = r;
    });
    return (out ?? value) as T;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return value;
  let out: Record<string, unknown> | undefined;
  for (const [k, v] of Object.entries(value)) {
    const r = redactCredentials(v, depth - 1);
    if (r === v) continue;
    out ??= { ...(value as Record<string, unknown>) };
    out[k] = r;
  }
  return (out ?? value) as T;
}
