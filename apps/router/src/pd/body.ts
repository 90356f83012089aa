// The bodies of a pair: the client's bytes with the router's members added at the front.
// A bootstrap_room is a 63-bit integer, beyond a JS number's exact range, so members are
// written as text, and the client's JSON is never parsed and re-serialized here: a member the
// router sets or drops is cut out of the bytes where the client had it (protocol's top-level
// member spans, commas included), so it is replaced, not duplicated.
import { randomBytes } from 'node:crypto';
import { topLevelSpansOf } from '@kvroute/protocol';

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
  // One structural walk for every member set or dropped, and one copy: the kept pieces of the
  // client's bytes and the new members are concatenated once (a prompt-sized copy costs more
  // than the walk). No substring pre-check: Buffer searches for a multi-byte needle measured
  // slower on a 64 KiB body than the walk itself.
  const names = new Set([...Object.keys(members), ...drop]);
  const spans = names.size > 0 ? topLevelSpansOf(raw, names) : [];
  const open = raw.indexOf(0x7b);
  const kept: Buffer[] = [];
  let at = open + 1;
  for (const [s, e] of spans) {
    if (s > at) kept.push(raw.subarray(at, s));
    at = e;
  }
  kept.push(raw.subarray(at));
  const text = memberText(members);
  const parts = [raw.subarray(0, open + 1)];
  if (text !== '') parts.push(Buffer.from(isEmptyRest(kept) ? text : `${text},`));
  return Buffer.concat([...parts, ...kept]);
}

/** Whether what follows the `{` is only whitespace and the `}`: no member is left. */
function isEmptyRest(pieces: readonly Buffer[]): boolean {
  for (const b of pieces) {
    for (let k = 0; k < b.length; k++) {
      const c = b[k];
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) continue;
      return c === 0x7d;
    }
  }
  return true;
}
