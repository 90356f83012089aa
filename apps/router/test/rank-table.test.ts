// Rank numbering. A fixed --worker-urls list keeps its order and leaves tombstones, so indexes
// never shift; an ordered table (service discovery) numbers ranks by worker URL, so two
// router replicas that saw different pod churn still give every worker the same rank, and
// the hash methods send a prefix to the same worker from both.
import { createDispatcher } from '@kvroute/policy';
import { describe, expect, it } from 'vitest';
import { RankTable } from '../src/rank-table.ts';

const url = (i: number) => `http://10.0.0.${i}:30001`;
const layout = (t: RankTable) =>
  t.info().map((r) => ({ rank: r.rank, url: r.url, dp: r.dpRank, removed: r.removed }));

describe('RankTable', () => {
  it('keeps a static table in its add order, reusing a removed worker’s tombstone', () => {
    const t = new RankTable();
    for (const i of [3, 1, 2]) t.addWorker(url(i), 1, false);
    t.removeWorker(url(3));
    t.addWorker(url(4), 1, false);
    expect(layout(t).map((r) => r.url)).toEqual([url(4), url(1), url(2)]);
  });

  it('numbers an ordered table by URL, whatever add and remove history each replica saw', () => {
    // Replica A starts with pods 2 and 3, then pod 2 is replaced by pod 4 and pod 1 joins.
    const a = new RankTable();
    a.ordered = true;
    a.addWorker(url(2), 1, false);
    a.addWorker(url(3), 1, false);
    a.removeWorker(url(2));
    a.addWorker(url(4), 1, false);
    a.addWorker(url(1), 1, false);
    // Replica B starts afterwards and lists the same pods in another order.
    const b = new RankTable();
    b.ordered = true;
    for (const i of [4, 1, 3]) b.addWorker(url(i), 1, false);

    const want = [
      { rank: 0, url: url(1), dp: null, removed: false },
      { rank: 1, url: url(3), dp: null, removed: false },
      { rank: 2, url: url(4), dp: null, removed: false },
    ];
    expect(layout(a)).toEqual(want);
    expect(layout(b)).toEqual(want);
    expect(a.tracker.ranks.map((r) => r.healthy)).toEqual([true, true, true]);
    expect(a.worker(url(4))?.ranks).toEqual([2]);

    // The same prefix goes to the same worker from both.
    const da = createDispatcher({ method: 'prefix_match' });
    const db = createDispatcher({ method: 'prefix_match' });
    for (let p = 0; p < 50; p++) {
      const inputIds = Array.from({ length: 300 }, (_, i) => (i * 7919 + p * 104729) % 32000);
      const ra = da.dispatch({ inputIds }, a.view()).rank;
      const rb = db.dispatch({ inputIds }, b.view()).rank;
      expect(a.slot(ra)?.worker.url).toBe(b.slot(rb)?.worker.url);
    }
  });

  it('tells the policy where each rank went as an ordered table renumbers, so a learned prefix stays on its worker', () => {
    const t = new RankTable();
    t.ordered = true;
    const d = createDispatcher({ method: 'cache_aware' });
    const told: [readonly number[], number][] = [];
    t.onRenumber = (moves, n) => {
      told.push([moves, n]);
      d.remapRanks(moves, n);
    };
    t.addWorker(url(5), 1, false);
    t.addWorker(url(7), 2, true);
    // Appended after the others: nothing moved, nothing to tell.
    expect(told).toEqual([]);
    // The policy learns a prompt on the DP server's second rank (rank 2), which is still
    // generating when the ranks renumber.
    const prompt = Array.from({ length: 3000 }, (_, i) => (i * 7919) % 32000);
    const inFlight = d.begin({ inputIds: prompt, routedRank: 2 }, t.tracker);
    const load = () => t.tracker.ranks.map((r) => r.inFlightRequests);
    expect(load()).toEqual([0, 0, 1]);
    // A pod that sorts first joins (every rank moves up one), then the pod at rank 1 leaves.
    t.addWorker(url(1), 1, false);
    expect(load()).toEqual([0, 0, 0, 1]);
    t.removeWorker(url(5));
    expect(told).toEqual([
      [[1, 2, 3], 4],
      [[0, -1, 1, 2], 3],
    ]);
    // The request's load stayed with its worker, and finishing it releases it there.
    expect(load()).toEqual([0, 0, 1]);
    inFlight.done();
    expect(load()).toEqual([0, 0, 0]);
    const again = d.begin({ inputIds: prompt }, t.tracker);
    again.done();
    expect(again.rank).toBe(2);
    expect(again.reason).toBe('cache-hit');
    expect(t.slot(2)?.worker.url).toBe(url(7));
    expect(t.slot(2)?.dpRank).toBe(1);
  });

  it('names each rank by its worker for the hash methods: no user information, DP rank, none for a tombstone', () => {
    const t = new RankTable();
    t.addWorker('http://user:secret@10.0.0.9:30001/v1/', 1, false);
    t.addWorker(url(2), 2, true);
    t.addWorker(url(3), 1, false);
    expect(t.rankNames()).toEqual([
      'http://10.0.0.9:30001/v1#0',
      `${url(2)}#0`,
      `${url(2)}#1`,
      `${url(3)}#0`,
    ]);
    t.removeWorker(url(2));
    expect(t.rankNames()).toEqual(['http://10.0.0.9:30001/v1#0', null, null, `${url(3)}#0`]);
  });

  it('tells the policy when a new worker takes a removed one’s place in a static table', () => {
    const t = new RankTable();
    const told: [readonly number[], number][] = [];
    t.onRenumber = (moves, n) => told.push([moves, n]);
    for (const i of [1, 2]) t.addWorker(url(i), 1, false);
    // A request still running on worker 1 when it is removed.
    const claim = t.tracker.claim(0, 100);
    t.removeWorker(url(1));
    expect(told).toEqual([]);
    // The newcomer takes rank 0: what was learned there was the removed worker's, and so is
    // the load still counted there. Its second rank is a new one.
    t.addWorker(url(3), 2, true);
    expect(told).toEqual([[[-1, 1], 3]]);
    expect(t.tracker.ranks.map((r) => [r.inFlightRequests, r.healthy])).toEqual([
      [0, true],
      [0, true],
      [0, true],
    ]);
    // The removed worker's request finishing later drains nothing of the newcomer's.
    const mine = t.tracker.claim(0, 5);
    t.tracker.release(claim);
    expect(t.tracker.ranks[0]).toMatchObject({ inFlightRequests: 1, inFlightTokens: 5 });
    t.tracker.release(mine);
  });

  it('keeps a DP server’s ranks together in an ordered table, and health follows the worker', () => {
    const t = new RankTable();
    t.ordered = true;
    const late = t.addWorker(url(9), 2, true);
    t.setHealthy(late, false);
    t.addWorker(url(5), 2, true);
    expect(layout(t)).toEqual([
      { rank: 0, url: url(5), dp: 0, removed: false },
      { rank: 1, url: url(5), dp: 1, removed: false },
      { rank: 2, url: url(9), dp: 0, removed: false },
      { rank: 3, url: url(9), dp: 1, removed: false },
    ]);
    // The down worker's health moved with it to its new ranks.
    expect(t.tracker.ranks.map((r) => r.healthy)).toEqual([true, true, false, false]);
    expect(late.ranks).toEqual([2, 3]);
    t.removeWorker(url(5));
    expect(t.size).toBe(2);
    expect(late.ranks).toEqual([0, 1]);
    expect(t.tracker.ranks.map((r) => r.healthy)).toEqual([false, false]);
  });
});
