// SGLang's DP attention (--enable-dp-attention): each DP rank owns its requests and KV, but
// the MoE layers run across all ranks, so every rank executes each forward pass together
// (ranks with no work run an idle batch). One rank's prefill therefore stalls every rank's
// decodes for its duration. This driver reproduces that: each global step lasts as long as
// the slowest member's share of it, and runs of decode-only steps are coalesced across the
// whole group as RankModel does for one rank.
import type { ScheduledEvent, Scheduler } from '../engine/event-queue.ts';
import {
  type CoalescedRun,
  cutCoalescedRun,
  type DecodeState,
  type PrefillPlan,
  RankModel,
  type RankModelOptions,
  type StepDriver,
} from './rank.ts';

interface GroupRun extends CoalescedRun {
  members: { rank: RankModel; state: DecodeState }[];
}

export class DpAttentionGroup implements StepDriver {
  private members: RankModel[] = [];
  private busy = false;
  private kick: ScheduledEvent | null = null;
  private run: GroupRun | null = null;
  /** Global forward passes run so far (a coalesced run counts its steps). */
  steps = 0;

  constructor(private readonly scheduler: Scheduler) {}

  /** Creates a rank driven by this group. */
  add(opts: Omit<RankModelOptions, 'driver' | 'scheduler'>): RankModel {
    const rank = new RankModel({ ...opts, scheduler: this.scheduler, driver: this });
    this.members.push(rank);
    return rank;
  }

  /** Stops driving `rank` (it died or was removed); its in-flight step is discarded by abort. */
  remove(rank: RankModel): void {
    this.members = this.members.filter((m) => m !== rank);
  }

  wake(): void {
    if (this.run !== null) {
      this.cut();
      return;
    }
    if (this.busy || this.kick !== null) return;
    this.kick = this.scheduler.at(this.scheduler.now(), () => {
      this.kick = null;
      this.step();
    });
  }

  private step(): void {
    const now = this.scheduler.now();
    const members = this.members.slice();
    const plans: (PrefillPlan | null)[] = members.map((m) => m.planPrefill());
    if (plans.some((p) => p !== null)) {
      // One forward pass everywhere: prefill ranks run their chunk (+ their decodes), the
      // others one decode step; it ends when the slowest rank's share ends.
      let ms = 0;
      const decodeOnly: { rank: RankModel; state: DecodeState }[] = [];
      members.forEach((m, i) => {
        const p = plans[i];
        if (p) ms = Math.max(ms, p.prefillMs + p.decodeMs);
        else {
          const st = m.decodeState();
          if (st) {
            decodeOnly.push({ rank: m, state: st });
            ms = Math.max(ms, m.decodeStepMs(st, 0));
          }
        }
      });
      this.busy = true;
      this.steps++;
      this.scheduler.at(now + ms, () => {
        members.forEach((m, i) => {
          const p = plans[i];
          if (p) m.applyPrefill(p);
        });
        for (const d of decodeOnly) d.rank.applyDecode(1, now, () => ms);
        this.busy = false;
        this.step();
      });
      return;
    }
    const running: { rank: RankModel; state: DecodeState }[] = [];
    let steps = Number.POSITIVE_INFINITY;
    for (const m of members) {
      const st = m.decodeState();
      if (st) {
        running.push({ rank: m, state: st });
        steps = Math.min(steps, st.steps);
      }
    }
    if (running.length === 0) {
      this.busy = false;
      return;
    }
    let ms = 0;
    for (let j = 0; j < steps; j++) ms += this.stepMs(running, j);
    this.busy = true;
    const event = this.scheduler.at(now + ms, () => this.endRun());
    this.run = { t0: now, members: running, steps, event };
  }

  private stepMs(running: { rank: RankModel; state: DecodeState }[], j: number): number {
    let ms = 0;
    for (const r of running) ms = Math.max(ms, r.rank.decodeStepMs(r.state, j));
    return ms;
  }

  private cut(): void {
    const run = this.run;
    if (run === null) return;
    cutCoalescedRun(
      run,
      this.scheduler,
      (j) => this.stepMs(run.members, j),
      () => this.endRun(),
    );
  }

  private endRun(): void {
    const run = this.run!;
    this.run = null;
    this.steps += run.steps;
    const stepMs = (j: number) => this.stepMs(run.members, j);
    for (const r of run.members) {
      if (this.members.includes(r.rank)) r.rank.applyDecode(run.steps, run.t0, stepMs);
    }
    this.busy = false;
    this.step();
  }
}
