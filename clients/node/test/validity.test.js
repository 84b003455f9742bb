// expiresAt counts from when the request was sent, never from when the
// answer arrived: an answer handled late (a busy event loop) must not
// stretch the validity past what the daemon measured. The delay is put
// between the daemon's answer and the client's handling of it.
import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, test } from 'node:test';

import { RedlockClient } from '../index.js';
import { startDaemon, uniq } from '../test-helpers/daemon.js';

const DELAY = 400; // ms each chunk read waits before the client sees it
let daemon;

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  const r = await daemon?.stop();
  assert.deepEqual(r, { code: 0, signal: null }, `daemon exit on SIGTERM\n${daemon?.output()}`);
});

function slowReads() {
  const emit = net.Socket.prototype.emit;
  net.Socket.prototype.emit = function delayed(ev, ...args) {
    if (ev === 'data') {
      setTimeout(() => emit.call(this, ev, ...args), DELAY);
      return true;
    }
    return emit.call(this, ev, ...args);
  };
  return () => {
    net.Socket.prototype.emit = emit;
  };
}

test('expiresAt counts from the send of acquire and extend', async () => {
  const c = new RedlockClient({ path: daemon.sock, timeoutMs: 5000 });
  try {
    await c.ping(); // connected: what follows times the requests alone
    const restore = slowReads();
    let lock;
    try {
      let t0 = Date.now();
      lock = await c.acquire(uniq(), { ttlMs: 10000 });
      let t1 = Date.now();
      assert.ok(t1 - t0 >= DELAY - 5, `answer after ${t1 - t0} ms`);
      assert.ok(lock.expiresAt >= t0 + lock.validityMs);
      assert.ok(lock.expiresAt <= t0 + lock.validityMs + 150, `expiresAt - t0 = ${lock.expiresAt - t0}`);
      t0 = Date.now();
      await c.extend(lock, 20000);
      t1 = Date.now();
      assert.ok(lock.validityMs > 10000);
      assert.ok(t1 - t0 >= DELAY - 5, `answer after ${t1 - t0} ms`);
      assert.ok(lock.expiresAt <= t0 + lock.validityMs + 150, `expiresAt - t0 = ${lock.expiresAt - t0}`);
    } finally {
      restore();
    }
    await c.release(lock);
  } finally {
    await c.close();
  }
});
