// The recorder's admin routes (behind the admin token, registered by plugins/admin.ts):
//   GET  /trace_recording                        what is being recorded, where, how much
//   POST /trace_recording {"action":"start", "path"?, "sample_rate"?, "block_tokens"?}
//   POST /trace_recording {"action":"stop"}
// A start without a path records to --record-trace's; other settings default to the flags.
import { parseJsonBody } from '@kvroute/protocol';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { RouterError } from '../errors.ts';
import type { RouterState } from '../state.ts';
import { recordingSettings } from './recorder.ts';

export function registerTraceRecording(
  app: FastifyInstance,
  state: RouterState,
  authorize: (req: FastifyRequest) => Promise<void>,
): void {
  app.get('/trace_recording', { onRequest: authorize }, async () => state.recorder.status());
  app.post('/trace_recording', { onRequest: authorize }, async (req) => {
    const body = parseJsonBody((req.body as Buffer | undefined) ?? Buffer.alloc(0));
    const action = body.action;
    if (action === 'stop') return state.recorder.stop();
    if (action !== 'start') {
      throw new RouterError(
        'invalid_admin_request',
        `'action' must be "start" or "stop", got ${JSON.stringify(action)}`,
        'action',
      );
    }
    if (state.config.pdDisaggregation) {
      throw new RouterError(
        'invalid_admin_request',
        'recording does not apply to --pd-disaggregation yet: its requests take the prefill/decode path, which the recorder does not follow',
        'action',
      );
    }
    const path = body.path ?? state.config.recordTrace;
    if (typeof path !== 'string' || path.length === 0) {
      throw new RouterError(
        'invalid_admin_request',
        "'path' must be a file path string (the router has no --record-trace to default to)",
        'path',
      );
    }
    const settings = recordingSettings(state.config, path);
    const rate = body.sample_rate;
    if (rate !== undefined) {
      if (typeof rate !== 'number' || !(rate > 0 && rate <= 1)) {
        throw new RouterError(
          'invalid_admin_request',
          `'sample_rate' must be a number in (0, 1], got ${JSON.stringify(rate)}`,
          'sample_rate',
        );
      }
      settings.sampleRate = rate;
    }
    const block = body.block_tokens;
    if (block !== undefined) {
      if (typeof block !== 'number' || !Number.isInteger(block) || block < 1) {
        throw new RouterError(
          'invalid_admin_request',
          `'block_tokens' must be an integer >= 1, got ${JSON.stringify(block)}`,
          'block_tokens',
        );
      }
      settings.blockTokens = block;
    }
    try {
      return await state.recorder.start(settings);
    } catch (err) {
      throw new RouterError('invalid_admin_request', (err as Error).message, 'path');
    }
  });
}
