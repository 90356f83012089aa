// A sweep's winning setting as a kvroute-router YAML config snippet. The router's YAML keys
// are its flag names, and a method option's flag is derived from the option's name by the
// policy's optionFlag, the same derivation the router uses, so the snippet needs no table of
// its own and a method added to the registry is written correctly without edits here.
import { optionFlag } from '@kvroute/policy';
import type { OptionValue, SweepSetting } from './axes.ts';

const PLAIN = /^[A-Za-z_][A-Za-z0-9_-]*$/;
// Words YAML would read as something other than a string.
const RESERVED = /^(true|false|yes|no|on|off|null|y|n)$/i;

/** YAML for one scalar: numbers as numerals, plain words as is, anything else quoted. */
function scalar(v: OptionValue): string {
  if (typeof v === 'number') return String(v);
  return PLAIN.test(v) && !RESERVED.test(v) ? v : JSON.stringify(v);
}

/**
 * The router config that runs `setting`: `load-balance-method`, one key per option the
 * setting sets (the others are the method's defaults in the router as in the simulator), and
 * the affinity the sweep ran with. `comments` go on top, one `# ` line each.
 */
export function routerConfigYaml(
  setting: SweepSetting,
  affinity: Record<string, unknown> | undefined,
  comments: readonly string[] = [],
): string {
  const lines = comments.map((c) => `# ${c}`);
  lines.push(`load-balance-method: ${scalar(setting.method)}`);
  for (const [name, value] of Object.entries(setting.options)) {
    lines.push(`${optionFlag(name)}: ${scalar(value)}`);
  }
  if (affinity !== undefined && affinity.kind !== undefined && affinity.kind !== 'none') {
    lines.push(`dp-cache-affinity: ${scalar(String(affinity.kind))}`);
    if (typeof affinity.maxEntries === 'number') {
      lines.push(`affinity-max-entries: ${affinity.maxEntries}`);
    }
    if (typeof affinity.ttlMs === 'number') {
      // The simulator's ttlMs=0 means "no TTL"; the router has no spelling for that.
      lines.push(
        affinity.ttlMs > 0
          ? `affinity-ttl-ms: ${affinity.ttlMs}`
          : '# affinity ran without a TTL (ttlMs=0); the router needs one: set affinity-ttl-ms',
      );
    }
  }
  return `${lines.join('\n')}\n`;
}
