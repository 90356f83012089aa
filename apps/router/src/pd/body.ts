// The bodies of a pair: the client's bytes with the router's members added at the front.
// A bootstrap_room is a 63-bit integer, beyond a JS number's exact range, so members are
// written as text, and the client's JSON is never parsed and re-serialized here: a member the
// router sets or drops is cut out of the bytes where the client had it (protocol's top-level
// member spans, commas included), so it is replaced, not duplicated.
import { randomBytes } from 'node:crypto';
import { topLevelSpansOf, withRoutedRank } from '@kvroute/protocol';

/** A random room in [0, 2^63): SGLang's router draws one per request the same way. */
export function newBootstrapRoom(): bigint {
  return randomBytes(8).readBigUInt64BE() & 0x7fff_ffff_ffff_ffffn;
}

const BACKSLASH_U = Buffer.from('\\u');

/**
 * False when no member called one of `names` can be in `raw`: none of the names appears as a
 * quoted key and no escape (`\u`) could spell one otherwise. A memchr-speed test that spares
 * the walk for the usual body, which carries none of the router's members.
 */
function mayHoldAny(raw: Buffer, names: ReadonlySet<string>): boolean {
  if (raw.includes(BACKSLASH_U)) return true;
  for (const n of names) if (raw.includes(`"${n}"`)) return true;
  return false;
}

/** Members as `"key":<json>` text; a bigint is written as its digits. */
export type Members = Record<string, string | number | boolean | bigint | null | object>;

function memberText(members: Members): string {
  return Object.entries(members)
    .map(
      ([k, v]) =>
        `${JSON.stringify(k)}:${typeof v === 'bigint' ? v.toString() : JSON.stringify(v)}`,
    )
    .join(',');
}

/**
 * `raw` with `members` set at the top level (replacing any the client sent) and the `drop`
 * members removed.
 */
export function withMembers(raw: Buffer, members: Members, drop: readonly string[] = []): Buffer {
  // One structural walk for every member set or dropped (withRoutedRank with no rank only cuts
  // the given spans out).
  const names = new Set([...Object.keys(members), ...drop]);
  if (names.size > 0 && mayHoldAny(raw, names)) {
    const spans = topLevelSpansOf(raw, names);
    if (spans.length > 0) raw = withRoutedRank(raw, spans, undefined);
  }
  const open = raw.indexOf(0x7b);
  let k = open + 1;
  while (
    k < raw.length &&
    (raw[k] === 0x20 || raw[k] === 0x0a || raw[k] === 0x0d || raw[k] === 0x09)
  )
    k++;
  const empty = raw[k] === 0x7d;
  const text = memberText(members);
  return Buffer.concat([
    raw.subarray(0, open + 1),
    Buffer.from(empty || text === '' ? text : `${text},`),
    raw.subarray(open + 1),
  ]);
}
