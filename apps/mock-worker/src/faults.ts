// Fault injection (--fail-rate, --fail-after, --fail-mode): the one place that decides
// whether a request fails and how the failure looks, so the routes only ask.
import { openAIErrorBody, ProtocolError } from '@kvroute/protocol';
import { stream } from '@kvroute/sim/model';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { WorkerMetrics } from './metrics.ts';
import type { ResolvedOptions } from './options.ts';

export type FaultReason = 'fail_after' | 'fail_rate';

export interface Faults {
  /** True once --fail-after has tripped: the engine counts as broken (health answers 503). */
  failing(): boolean;
  /** The 503 body /health and /health_generate answer while failing. */
  healthError(): ReturnType<typeof openAIErrorBody>;
  /**
   * Counts one inference request and fails it if a knob says so: a thrown 500 in OpenAI's
   * shape, or (reset mode) a destroyed socket, after which this returns true and the caller
   * must not answer.
   */
  maybeFail(req: FastifyRequest, reply: FastifyReply): boolean;
}

export function createFaults(opts: ResolvedOptions, metrics: WorkerMetrics): Faults {
  // Fault draws come from their own seeded stream, as every random choice in the simulator.
  const random = stream(opts.seed, 'mock-worker-faults');
  let received = 0;
  const failing = () => opts.failAfter !== undefined && received > opts.failAfter;
  return {
    failing,
    healthError: () =>
      openAIErrorBody(503, 'mock worker is failing every request (--fail-after)', {
        code: 'injected_failure',
      }),
    maybeFail(req, reply) {
      received++;
      const reason: FaultReason | null = failing()
        ? 'fail_after'
        : opts.failRate > 0 && random() < opts.failRate
          ? 'fail_rate'
          : null;
      if (reason === null) return false;
      metrics.injectedFailures.inc({ reason });
      if (opts.failMode === 'reset') {
        reply.hijack();
        req.raw.socket.destroy();
        return true;
      }
      throw new ProtocolError(500, `injected failure (--${reason.replace('_', '-')})`, {
        code: 'injected_failure',
      });
    },
  };
}
