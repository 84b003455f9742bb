// Limits and shutdown, against a redlockd --dev with small limits:
// too_large (and the close after it), limit, shutting_down.
import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';

import {
  ConnectionLostError,
  LimitError,
  LostError,
  RedlockClient,
  ShuttingDownError,
  TooLargeError,
} from '../index.js';
import { sleep, startDaemon, uniq } from '../test-helpers/daemon.js';

let daemon;
const clients = [];
function client(opts = {}) {
  const c = new RedlockClient({ path: daemon.sock, ...opts });
  clients.push(c);
  return c;
}
async function closeAll() {
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
}

before(async () => {
  daemon = await startDaemon({
    args: ['--max-line-bytes', '1024', '--max-conn-locks', '3', '--max-waiters', '1', '--max-connections', '4'],
  });
});

afterEach(async () => {
  await closeAll();
  await sleep(50); // the daemon counts --max-connections: let it see the closes
});

after(async () => {
  await closeAll();
  await daemon?.stop();
});

describe('too_large', () => {
  test('the client refuses a line over its maxLineBytes', async () => {
    const c = client({ maxLineBytes: 1024 });
    await assert.rejects(c.request({ op: 'ping', pad: 'x'.repeat(2000) }), TooLargeError);
    await c.ping();
  });

  test('maxLineBytes is the daemon\'s --max-line-bytes exactly (the newline not counted)', async () => {
    // A fresh client's first request has id 1: a ping padded to `len`
    // bytes of JSON (without the newline). The daemon knows no field `pad`:
    // a line it read answers bad_request naming it, one over the limit
    // too_large (and the connection closes).
    const ping = (len) => {
      const pad = 'x'.repeat(len - JSON.stringify({ op: 'ping', pad: '', id: 1 }).length);
      return { op: 'ping', pad };
    };
    const read = { name: 'BadRequestError', message: /unknown field 'pad'/ };
    // The daemon (--max-line-bytes 1024) reads 1024 bytes and refuses 1025.
    await assert.rejects(client({ maxLineBytes: 1 << 20 }).request(ping(1024)), read);
    await assert.rejects(client({ maxLineBytes: 1 << 20 }).request(ping(1025)), TooLargeError);
    // The client with the same limit sends the first and refuses the
    // second locally, keeping its connection (and its locks).
    const c = client({ maxLineBytes: 1024 });
    await assert.rejects(c.request(ping(1024)), read);
    const lock = await c.acquire(uniq(), { ttlMs: 10_000 });
    await assert.rejects(c.request(ping(1025)), {
      name: 'TooLargeError',
      message: /request line of \d+ bytes is over 1024 \(not sent\)/,
    });
    assert.equal(lock.signal.aborted, false);
    await lock.release();
  });

  test('a dropped connection: in-flight requests reject, locks are lost, next call reconnects', async () => {
    // maxLineBytes lifted so that the daemon sees an over-long line: it
    // answers too_large (without id) and closes the connection.
    const a = client({ maxLineBytes: 1 << 20 });
    const b = client();
    const r = uniq();
    const held = await b.acquire(r, { ttlMs: 10_000 });
    const lock = await a.acquire(uniq(), { ttlMs: 60_000 });
    const lost = [];
    a.on('lost', (l) => lost.push(l));
    const waiting = a.acquire(r, { waitMs: 5000 });
    await sleep(100);
    const big = a.request({ op: 'ping', pad: 'x'.repeat(2000) });
    const t0 = Date.now();
    for (const p of [waiting, big]) {
      await assert.rejects(p, (e) => {
        assert.ok(e instanceof ConnectionLostError, String(e));
        assert.equal(e.code, 'connection_lost');
        assert.ok(e.cause instanceof TooLargeError, 'the daemon said why');
        return true;
      });
    }
    assert.ok(Date.now() - t0 < 1000, 'the waiter did not hold the close up');
    assert.equal(lock.signal.aborted, true);
    assert.ok(lock.signal.reason instanceof LostError);
    assert.deepEqual(lost, [lock]);
    assert.equal(a.connected, false);
    // The daemon released the session lock of the dropped connection.
    const again = await b.acquire(lock.resource, { ttlMs: 1000, waitMs: 1000 });
    await again.release();
    assert.ok((await a.ping()) >= 0, 'reconnects on the next call');
    assert.equal(a.connected, true);
    await held.release();
  });

  test('an answer without id (too_large) goes to the only request waiting', async () => {
    const a = client({ maxLineBytes: 1 << 20 });
    await assert.rejects(a.request({ op: 'ping', pad: 'x'.repeat(2000) }), (e) => {
      assert.ok(e instanceof TooLargeError, String(e));
      assert.equal(e.code, 'too_large');
      return true;
    });
    await a.ping();
  });

  test('--max-connections: the extra connection fails fast (limit line at accept), served once a slot frees', async () => {
    // --max-connections 4: the fifth connection gets one limit line, closed.
    const held = [];
    for (let i = 0; i < 4; i++) {
      const c = client();
      await c.ping();
      held.push(c);
    }
    const extra = client();
    // The daemon writes one limit line and closes at accept; the request
    // we wrote meanwhile may hit EPIPE first, which loses that line.
    await assert.rejects(extra.ping(), (e) => {
      assert.ok(e instanceof LimitError || e instanceof ConnectionLostError, String(e));
      return true;
    });
    await held[0].close();
    await sleep(100);
    assert.ok((await extra.ping()) >= 0, 'served once a slot is free');
  });
});

describe('limit', () => {
  test('--max-conn-locks: LimitError, and the connection goes on', async () => {
    const c = client();
    const base = uniq('cl');
    const locks = [];
    for (let i = 0; i < 3; i++) locks.push(await c.acquire(`${base}:${i}`, { ttlMs: 10_000 }));
    await assert.rejects(c.acquire(`${base}:3`, { ttlMs: 10_000 }), (e) => {
      assert.ok(e instanceof LimitError, String(e));
      assert.equal(e.code, 'limit');
      return true;
    });
    assert.ok(locks.every((l) => !l.signal.aborted));
    await locks[0].release();
    const more = await c.acquire(`${base}:3`, { ttlMs: 10_000 });
    await Promise.all([...locks.slice(1), more].map((l) => l.release()));
  });

  test('--max-waiters: LimitError for the second waiter', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 10_000 });
    const first = b.acquire(r, { waitMs: 3000 });
    await sleep(100);
    await assert.rejects(b.acquire(r, { waitMs: 3000 }), LimitError);
    await held.release();
    const got = await first;
    await got.release();
  });
});

describe('shutdown', () => {
  test('SIGTERM: a waiter gets ShuttingDownError, held locks are lost, the daemon exits 0', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 30_000, renew: true });
    const waiting = b.acquire(r, { waitMs: 10_000 });
    await sleep(100);
    daemon.terminate();
    await assert.rejects(waiting, (e) => {
      assert.ok(e instanceof ShuttingDownError, String(e));
      assert.equal(e.code, 'shutting_down');
      return true;
    });
    const deadline = Date.now() + 5000;
    while (!held.signal.aborted && Date.now() < deadline) await sleep(20);
    assert.ok(held.signal.reason instanceof LostError);
    // Calls after the daemon is gone fail fast.
    await assert.rejects(a.ping(), ConnectionLostError);
    const r2 = await daemon.stop();
    assert.deepEqual(r2, { code: 0, signal: null });
  });
});
