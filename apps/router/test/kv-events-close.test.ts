// A KV-event stream the feed dropped (its worker left, or its rank was renumbered) may still
// have work queued: a join replay in flight, a probe of a quiet publisher. Once closed it must
// open no socket and hand on no batch, or an old worker's blocks would land on a rank that is
// now another worker's. A fake zmq makes the order of events exact.
import { EventEmitter } from 'node:events';
import { encodeSeq } from '@kvroute/protocol/kv-events';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { KvEventStream } from '../src/kv-events/subscriber.ts';

const packr = new Packr({ useRecords: false });

describe('a closed KV-event stream', () => {
  it('opens no replay socket and applies no batch for work queued before it closed', async () => {
    const dealers: FakeDealer[] = [];
    class FakeDealer {
      closed = false;
      private fail: ((e: Error) => void) | undefined;
      private readonly queue: Buffer[][] = [];
      constructor() {
        dealers.push(this);
      }
      connect(): void {}
      async send(): Promise<void> {
        if (this.closed) throw new Error('Socket is closed');
        // The publisher's buffer: one batch at seq 0, then the end marker.
        const batch = [Date.now() / 1000, [['BlockStored', [1], null, [1, 2], 2, null]]];
        this.queue.push([Buffer.alloc(0), encodeSeq(0), packr.pack(batch)]);
        this.queue.push([Buffer.alloc(0), encodeSeq(-1), Buffer.alloc(0)]);
      }
      receive(): Promise<Buffer[]> {
        if (this.closed) return Promise.reject(new Error('Socket is closed'));
        // The first dealer's answer is slow: a large join replay still in flight.
        if (dealers.indexOf(this) === 0) return new Promise((_res, rej) => (this.fail = rej));
        return Promise.resolve(this.queue.shift()!);
      }
      close(): void {
        this.closed = true;
        this.fail?.(new Error('Socket is closed'));
      }
    }
    class FakeSub {
      readonly events = new EventEmitter();
      private wake: (() => void) | undefined;
      connect(): void {}
      subscribe(): void {}
      close(): void {
        this.wake?.();
      }
      async *[Symbol.asyncIterator](): AsyncGenerator<Buffer[]> {
        await new Promise<void>((r) => (this.wake = r));
      }
    }
    let applied = 0;
    const zmq = { Subscriber: FakeSub, Dealer: FakeDealer } as unknown as ConstructorParameters<
      typeof KvEventStream
    >[0];
    const s = new KvEventStream(
      zmq,
      { endpoint: 'tcp://127.0.0.1:1', replayEndpoint: 'tcp://127.0.0.1:2', topic: '' },
      {
        batch: () => {
          applied++;
        },
        reset: () => {},
        warn: () => {},
        info: () => {},
      },
    );
    s.start();
    // Connected: the join replay is queued and waits on the first dealer.
    (s as unknown as { sub: FakeSub }).sub.events.emit('connect');
    await new Promise((r) => setTimeout(r, 10));
    // The feed's next tick probes the quiet stream, then drops it.
    s.probe();
    await s.close();
    await new Promise((r) => setTimeout(r, 50));
    expect(dealers).toHaveLength(1);
    expect(dealers.every((d) => d.closed)).toBe(true);
    expect(applied).toBe(0);
  });
});
