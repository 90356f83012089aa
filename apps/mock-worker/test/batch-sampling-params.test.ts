// A /generate batch as SGLang takes it: `sampling_params` may be a list, one dict per prompt,
// and each item then generates up to its own max_new_tokens.
import { afterEach, describe, expect, it } from 'vitest';
import { closeAll, type Json, post, sseEvents, worker } from './helpers.ts';

afterEach(closeAll);

describe('/generate batch with per-item sampling_params', () => {
  it('gives each item its own max_new_tokens (an item without one takes the default)', async () => {
    const app = worker();
    const r = await post(app, '/generate', {
      text: ['a', 'b', 'c'],
      sampling_params: [{ max_new_tokens: 2 }, { max_new_tokens: 5 }, {}],
      rid: ['r1', 'r2', 'r3'],
    });
    expect(r.status).toBe(200);
    const items = r.body as unknown as Json[];
    expect(items.map((i) => i.meta_info.id)).toEqual(['r1', 'r2', 'r3']);
    expect(items.map((i) => i.meta_info.completion_tokens)).toEqual([2, 5, 128]);
    expect(items.map((i) => i.output_ids.length)).toEqual([2, 5, 128]);
    expect(items[1].meta_info.finish_reason).toEqual({ type: 'length', length: 5 });

    const ids = await post(app, '/generate', {
      input_ids: [[1, 2], [3]],
      sampling_params: [{ max_new_tokens: 1 }, { max_new_tokens: 3 }],
    });
    expect(ids.status).toBe(200);
    expect((ids.body as unknown as Json[]).map((i) => i.meta_info.completion_tokens)).toEqual([
      1, 3,
    ]);
  });

  it('streams each item to its own limit', async () => {
    const app = worker();
    const res = await app.inject({
      method: 'POST',
      url: '/generate',
      payload: {
        text: ['x', 'y'],
        sampling_params: [{ max_new_tokens: 1 }, { max_new_tokens: 4 }],
        stream: true,
      },
    });
    expect(res.statusCode).toBe(200);
    const frames = (sseEvents(res.body) as Json[]).slice(0, -1);
    const last = [0, 1].map((index) => frames.filter((f) => f.index === index).at(-1));
    expect(last.map((f) => f.meta_info.finish_reason)).toEqual([
      { type: 'length', length: 1 },
      { type: 'length', length: 4 },
    ]);
  });

  it('answers 400 naming the item for a bad list', async () => {
    const app = worker();
    const cases: Array<[unknown, string]> = [
      [{ text: ['a', 'b'], sampling_params: [{ max_new_tokens: 1 }] }, 'sampling_params'],
      [{ text: 'a', sampling_params: [{ max_new_tokens: 1 }] }, 'sampling_params'],
      [
        { text: ['a', 'b'], sampling_params: [{}, { max_new_tokens: -1 }] },
        'sampling_params[1].max_new_tokens',
      ],
      [{ text: ['a', 'b'], rid: ['r1', 2] }, 'rid[1]'],
    ];
    for (const [body, param] of cases) {
      const r = await post(app, '/generate', body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.param).toBe(param);
    }
  });
});
