// Worker groups of a recording (a router with `--model-group`, one group per model): each group
// has its own ranks and its own policy, and a group's policy switch leaves the others alone.
// Replaying every group's requests through one dispatcher over all ranks would predict
// requests on ranks their model is not served on, under another group's policy, so a replay
// takes one group at a time: its requests, on its own ranks (renumbered 0..k-1), under its own
// recorded policy and switches. The groups' ranks are disjoint and nothing else is shared, so
// one group's replay is the same whatever the other groups' traffic was.
//
// The start line names each group's policy and its ranks. From a router that did not write
// the ranks, a group's ranks are those its requests were routed to in the recording (a rank of
// the group that served none of them is not known). A line belongs to the group its `model`
// names; a line whose model is not a group name (an alias, or none: the default group) belongs
// to the group that owns its rank.
import type { PolicySwitch, TraceObserved, TraceStart, TraceTable } from './trace-file.ts';
import { TraceFormatError } from './trace-file.ts';

export interface GroupSelection {
  /** The group's model name. */
  name: string;
  /** Its ranks in the recording, ascending; replayed as ranks 0..k-1. */
  ranks: number[];
  /** Request lines of the group, and of the whole recording. */
  requests: number;
  of: number;
  /** Lines assigned to no group (no model naming a group, no rank owned by one): left out. */
  unassigned: number;
}

/** Each row's group index (-1: none), and each group's ranks. */
export function assignGroups(
  start: TraceStart,
  table: TraceTable,
): { rowGroup: Int32Array; ranks: number[][] } {
  const groups = start.groups ?? [];
  const byName = new Map(groups.map((g, i) => [g.group, i]));
  const rowGroup = new Int32Array(table.length).fill(-1);
  const owner = new Map<number, number>();
  // Ranks the start line gives a group are its own, whoever its lines name.
  groups.forEach((g, i) => {
    for (const r of g.ranks ?? []) owner.set(r, i);
  });
  for (let i = 0; i < table.length; i++) {
    const o = table.observed(i);
    const g = o?.model !== undefined ? byName.get(o.model) : undefined;
    if (g === undefined) continue;
    rowGroup[i] = g;
    if (o?.rank !== undefined && !owner.has(o.rank)) owner.set(o.rank, g);
  }
  for (let i = 0; i < table.length; i++) {
    if (rowGroup[i] !== -1) continue;
    const rank = table.observed(i)?.rank;
    const g = rank !== undefined ? owner.get(rank) : undefined;
    if (g !== undefined) rowGroup[i] = g;
  }
  const ranks = groups.map((g) => new Set<number>(g.ranks ?? []));
  for (let i = 0; i < table.length; i++) {
    const g = rowGroup[i]!;
    const rank = table.observed(i)?.rank;
    // A rank added to the group later is among those its lines went to.
    if (g >= 0 && rank !== undefined) ranks[g]!.add(rank);
  }
  return { rowGroup, ranks: ranks.map((s) => [...s].sort((a, b) => a - b)) };
}

/**
 * The recording narrowed to one group: its rows (observed ranks renumbered to the group's
 * own), a start line with the group's policy and rank count, and its switches. Throws when
 * the recording has several groups and none was named, or the name is not one of them.
 */
export function selectGroup(
  file: string,
  start: TraceStart | undefined,
  table: TraceTable,
  switches: PolicySwitch[],
  group: string,
): { table: TraceTable; start?: TraceStart; switches: PolicySwitch[]; group?: GroupSelection } {
  const groups = start?.groups ?? [];
  if (group === '') {
    if (groups.length > 1) {
      throw new TraceFormatError(
        `${file}: recorded by a router with ${groups.length} worker groups (${groups.map((g) => g.group).join(', ')}), each on its own ranks with its own policy: replay one group at a time (--group NAME, or --set group=NAME)`,
      );
    }
    if (groups.length === 0) return { table, ...(start ? { start } : {}), switches };
  }
  if (start === undefined || groups.length === 0) {
    throw new TraceFormatError(
      `${file}: group ${JSON.stringify(group)}: the trace was not recorded by a router with worker groups (its start line lists no groups)`,
    );
  }
  const name = group === '' ? groups[0]!.group : group;
  const index = groups.findIndex((g) => g.group === name);
  if (index < 0) {
    throw new TraceFormatError(
      `${file}: no worker group ${JSON.stringify(name)} in the recording; its groups: ${groups.map((g) => g.group).join(', ')}`,
    );
  }
  const { rowGroup, ranks: allRanks } = assignGroups(start, table);
  const ranks = allRanks[index]!;
  const renumber = new Map(ranks.map((r, i) => [r, i]));
  const out = new (table.constructor as new () => TraceTable)();
  let unassigned = 0;
  for (let i = 0; i < table.length; i++) {
    const g = rowGroup[i]!;
    if (g === -1) unassigned++;
    if (g !== index) continue;
    const line = table.line(i);
    const o = line.observed as TraceObserved;
    if (o.rank !== undefined) line.observed = { ...o, rank: renumber.get(o.rank)! };
    out.push(line);
  }
  out.trim();
  const def = groups[index]!;
  const { groups: _all, ...rest } = start;
  // The default group's switches may come without a group on a router that wrote none.
  const isDefault =
    def.method === start.method && JSON.stringify(def.options) === JSON.stringify(start.options);
  return {
    table: out,
    start: {
      ...rest,
      method: def.method,
      options: def.options,
      ...(ranks.length > 0 ? { ranks: ranks.length } : {}),
    },
    switches: switches.filter((s) => (s.group === undefined ? isDefault : s.group === name)),
    group: { name, ranks, requests: out.length, of: table.length, unassigned },
  };
}
