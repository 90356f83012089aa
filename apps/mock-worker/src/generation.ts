// One prompt through the engine: submits it, turns the engine's callbacks into the request's
// Outcome (text, output ids, cached tokens, latency) and metrics, and lets the caller abort
// it. HTTP framing stays in routes/; this knows nothing of replies or sockets.
import type { EngineHandle, MockEngine } from './engine.ts';
import { fillerToken, fillerTokenId, promptSeed } from './filler.ts';
import type { WorkerMetrics } from './metrics.ts';
import type { Outcome } from './responses.ts';

export interface GenerationInput {
  inputIds: Uint32Array;
  /** Output tokens to report (0 is allowed: the prefill still runs and caches the prompt). */
  maxTokens: number;
  routingKey?: string;
  routedRank?: number;
  bootstrapRoom?: number;
}

export interface Generation {
  readonly handle: EngineHandle;
  /** Settles when the request finishes, or at once when it is aborted. */
  readonly done: Promise<void>;
  /** Drops the request from its rank if it is still running; true if it was. */
  abort(): boolean;
}

export interface GenerationDeps {
  engine: MockEngine;
  metrics: WorkerMetrics;
}

/**
 * Starts `input` on the engine, filling `outcome` as tokens come. `onDelta` sees each output
 * token's text after the outcome includes it; `onFinish` runs once, when it completes.
 */
export function startGeneration(
  deps: GenerationDeps,
  input: GenerationInput,
  outcome: Outcome,
  arrivalWall: number,
  on: { delta?(text: string): void; finish?(): void } = {},
): Generation {
  const { engine, metrics } = deps;
  const { inputIds, maxTokens } = input;
  const seed = promptSeed(inputIds);
  let settle!: () => void;
  const done = new Promise<void>((r) => {
    settle = r;
  });
  outcome.promptTokens = inputIds.length;
  const handle = engine.start(
    {
      inputIds,
      // max_tokens 0 still runs the prefill (one hidden token: the model needs at least one).
      maxNewTokens: Math.max(1, maxTokens),
      routingKey: input.routingKey,
      routedRank: input.routedRank,
      bootstrapRoom: input.bootstrapRoom,
    },
    {
      onFirstToken(cached) {
        outcome.cachedTokens = cached;
        metrics.firstToken(
          outcome.dpRank,
          inputIds.length,
          cached,
          (performance.now() - arrivalWall) / 1000,
        );
      },
      onToken(index) {
        if (index >= maxTokens) return; // the hidden token of a max_tokens 0 request
        const delta = fillerToken(seed, index);
        outcome.text += delta;
        outcome.outputIds.push(fillerTokenId(seed, index));
        outcome.completionTokens = index + 1;
        on.delta?.(delta);
      },
      onFinish() {
        outcome.finished = true;
        outcome.e2eLatency = (performance.now() - arrivalWall) / 1000;
        metrics.finished(outcome.dpRank, outcome.completionTokens, outcome.e2eLatency);
        on.finish?.();
        settle();
      },
    },
  );
  outcome.dpRank = handle.rank;
  return {
    handle,
    done,
    abort() {
      if (outcome.finished || !handle.abort()) return false;
      metrics.aborted(outcome.dpRank);
      settle();
      return true;
    },
  };
}
