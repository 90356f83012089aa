// The bodies of a pair: the client's bytes with the router's members added at the front.
// A bootstrap_room is a 63-bit integer, beyond a JS number's exact range, so members are
// written as text, and the client's JSON is never parsed and re-serialized here: a member the
// router sets or drops is cut out of the bytes where the client had it (protocol's top-level
// member spans, commas included), so it is replaced, not duplicated.
import { randomBytes } from 'node:crypto';
import { topLevelSpans, withRoutedRank } from '@kvroute/protocol';

/** A random room in [0, 2^63): SGLang's router draws one per request the same way. */
export function newBootstrapRoom(): bigint {
  return randomBytes(8).readBigUInt64BE() & 0x7fff_ffff_ffff_ffffn;
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
  for (const key of [...Object.keys(members), ...drop]) {
    const spans = topLevelSpans(raw, key);
    // withRoutedRank with no rank only cuts the given member spans out.
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
