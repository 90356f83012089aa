// The pair's bodies: members set or dropped on the client's bytes, 63-bit rooms as digits.
import { parseJsonBody } from '@kvroute/protocol';
import { describe, expect, it } from 'vitest';
import { newBootstrapRoom, withMembers } from '../src/pd/body.ts';

const b = (s: string) => Buffer.from(s);

describe('withMembers', () => {
  it('adds members at the front, keeping the client bytes', () => {
    const out = withMembers(b('{"model":"m",  "prompt":"x"}'), {
      bootstrap_host: 'p1',
      bootstrap_port: null,
      bootstrap_room: 9223372036854775807n,
    });
    expect(out.toString()).toBe(
      '{"bootstrap_host":"p1","bootstrap_port":null,"bootstrap_room":9223372036854775807,"model":"m",  "prompt":"x"}',
    );
    expect(withMembers(b(' { } '), { a: 1 }).toString()).toBe(' {"a":1 } ');
  });

  it('replaces members the client sent and drops the ones asked, wherever they are', () => {
    const raw = b(
      '{"stream":true,"messages":[{"role":"user","content":"\\"stream\\":true"}],"stream_options":{"include_usage":true},"bootstrap_room":1}',
    );
    const out = withMembers(raw, { stream: false, bootstrap_room: 5n }, ['stream_options']);
    const obj = parseJsonBody(out);
    expect(obj).toEqual({
      stream: false,
      bootstrap_room: 5,
      messages: [{ role: 'user', content: '"stream":true' }],
    });
    // A member only at the end, and a body made only of dropped members.
    expect(parseJsonBody(withMembers(b('{"a":1,"stream":true}'), { stream: false }))).toEqual({
      stream: false,
      a: 1,
    });
    expect(withMembers(b('{"stream_options":{}}'), {}, ['stream_options']).toString()).toBe('{}');
  });

  it('finds a member whose key is spelled with an escape, and members set and dropped at once', () => {
    const raw = b(
      '{"bootstrap\\u005froom":1,"a":"\\u00e9","stream_options":{"x":1},"stream":true}',
    );
    const out = withMembers(raw, { bootstrap_room: 7n, stream: false }, ['stream_options']);
    expect(parseJsonBody(out)).toEqual({ bootstrap_room: 7, stream: false, a: 'é' });
  });

  it('draws 63-bit rooms', () => {
    for (let i = 0; i < 100; i++) {
      const r = newBootstrapRoom();
      expect(r >= 0n && r < 2n ** 63n).toBe(true);
    }
  });
});
