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
  /**
   * Cache the reply's output ids with the prompt when it finishes (SGLang caches input +
   * output). Only for token-id prompts: a client sends those ids back verbatim in its next
   * turn, while a text reply does not tokenize back to the filler's ids here.
   */
  cacheReply?: boolean;
  /**
   * The cached_tokens the answer reports instead of the rank's own count (a PD decode's, see
   * PdPlan.reportCachedTokens); the worker's metrics still count the rank's own.
   */
  reportCachedTokens?: number;
}

/** The filler ids of a reply of `length` tokens, computed only when read (at finish). */
function replyIdsView(seed: number, length: number): ArrayLike<number> {
  return new Proxy({ length } as ArrayLike<number>, {
    get(target, key) {
      if (typeof key === 'string' && key !== 'length') {
        const i = Number(key);
        if (Number.isInteger(i) && i >= 0 && i < length) return fillerTokenId(seed, i);
        return undefined;
      }
      return Reflect.get(target, key);
    },
  });
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
      ...(input.cacheReply === true && maxTokens > 0
        ? { outputIds: replyIdsView(seed, maxTokens) }
        : {}),
      routingKey: input.routingKey,
      routedRank: input.routedRank,
      bootstrapRoom: input.bootstrapRoom,
    },
    {
      onFirstToken(cached) {
        outcome.cachedTokens = input.reportCachedTokens ?? cached;
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
