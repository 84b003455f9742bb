// Lost locks and quorum loss, against redlockd on our own five
// redis-server processes (so that three of them can be paused); extend
// through a second daemon on them.
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { after, afterEach, before, test } from 'node:test';

import { BusyError, LostError, NoQuorumError, RedlockClient } from '../index.js';
import { sleep, startDaemon, startRedisNodes, tmpDir, uniq } from '../test-helpers/daemon.js';

let dir;
let redis;
let daemon;
const clients = [];
function client(opts = {}) {
  const c = new RedlockClient({ path: daemon.sock, ...opts });
  clients.push(c);
  return c;
}

function pause3() {
  for (const n of redis.nodes.slice(0, 3)) n.pause();
}
function resumeAll() {
  for (const n of redis.nodes) if (n.c.paused) n.resume();
}

async function waitQuorum() {
  const c = client();
  const deadline = Date.now() + 10_000;
  for (;;) {
    const h = await c.health().catch((e) => ({ err: e }));
    if (h.nodes && h.nodes.filter((n) => n.up).length === 5) return;
    if (Date.now() > deadline) throw new Error(`nodes not all up again: ${JSON.stringify(h)}`);
    await sleep(100);
  }
}

before(async () => {
  dir = tmpDir('lost');
  redis = await startRedisNodes(dir, 5);
  daemon = await startDaemon({ nodes: redis.socks, dir });
});

afterEach(async () => {
  resumeAll();
  await Promise.all(clients.splice(0).map((c) => c.close().catch(() => {})));
});

after(async () => {
  resumeAll(); // never leave a stopped process behind
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await daemon?.stop();
  await redis?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test('extend without a ttl keeps the lock\'s ttl through another daemon', async () => {
  // A daemon that did not grant the lock does not know its ttl and took its
  // default (30 s) for an extend without one: a 2 s lock became a 30 s one
  // on the nodes. The client sends the Lock's own ttlMs.
  const other = await startDaemon({ nodes: redis.socks });
  try {
    const c1 = client();
    const c2 = new RedlockClient({ path: other.sock });
    clients.push(c2);
    const r = uniq('ext');
    const lock = await c1.acquire(r, { ttlMs: 2000 });
    assert.equal(lock.ttlMs, 2000);
    await c2.extend(lock);
    assert.ok(lock.validityMs <= 2000, `validity ${lock.validityMs}`);
    assert.ok((await c1.inspect(r)).pttl_ms <= 2000);
    // An extend with a ttl makes it the lock's, as on the daemon.
    await c1.extend(lock, 3000);
    assert.equal(lock.ttlMs, 3000);
    await c2.extend(lock);
    assert.ok(lock.validityMs > 2000 && lock.validityMs <= 3000, `validity ${lock.validityMs}`);
    assert.ok((await c1.inspect(r)).pttl_ms <= 3000);
    // Without ttlMs at acquire, the daemon's default.
    const plain = await c1.acquire(uniq('ext'));
    assert.equal(plain.ttlMs, 30_000);
    await plain.release();
    await lock.release();
  } finally {
    await other.stop();
  }
});

test('lock.signal aborts with a LostError when renewal loses the quorum', async () => {
  const c = client();
  const r = uniq('lost');
  const events = [];
  c.on('lost', (lock, err) => events.push([lock, err]));
  const lock = await c.acquire(r, { ttlMs: 600, renew: true });
  let abortedAt = 0;
  lock.signal.addEventListener('abort', () => {
    abortedAt = Date.now();
  });
  await sleep(250); // one renewal through
  assert.equal(lock.signal.aborted, false);
  const pausedAt = Date.now();
  pause3();
  const deadline = Date.now() + 5000;
  while (!lock.signal.aborted && Date.now() < deadline) await sleep(20);
  resumeAll();
  assert.equal(lock.signal.aborted, true, 'no lost event within 5 s');
  assert.ok(lock.signal.reason instanceof LostError, String(lock.signal.reason));
  assert.equal(lock.signal.reason.code, 'lost');
  assert.equal(lock.signal.reason.lock, lock);
  assert.equal(lock.lost, true);
  assert.ok(abortedAt - pausedAt < 2000, `lost after ${abortedAt - pausedAt} ms`);
  assert.equal(events.length, 1);
  assert.equal(events[0][0], lock);
  // The connection lives on: other requests still work.
  await waitQuorum();
  assert.ok((await c.ping()) >= 0);
  const again = await c.acquire(r, { ttlMs: 1000, waitMs: 2000 });
  await again.release();
});

test("'event' carries every lost event, also for a lock the client does not track", async () => {
  const c = client();
  const events = [];
  const lost = [];
  c.on('event', (m) => events.push(m));
  c.on('lost', (l) => lost.push(l));
  // Taken with request(): the client has no Lock for it, only the event.
  const raw = await c.request({ op: 'acquire', resource: uniq('raw-lost'), ttl_ms: 600, renew: true });
  assert.match(raw.lock, /^[0-9a-f]{32}$/);
  const tracked = await c.acquire(uniq('tracked-lost'), { ttlMs: 600, renew: true });
  await sleep(250);
  const isLost = (token) => events.some((m) => m.event === 'lost' && m.lock === token);
  pause3();
  try {
    const deadline = Date.now() + 5000;
    while (!(isLost(raw.lock) && isLost(tracked.token)) && Date.now() < deadline) await sleep(20);
  } finally {
    resumeAll();
  }
  assert.ok(isLost(tracked.token), `no 'event' for the tracked lock: ${JSON.stringify(events)}`);
  assert.ok(isLost(raw.lock), `no 'event' for the lock taken with request(): ${JSON.stringify(events)}`);
  const ev = events.find((m) => m.lock === raw.lock);
  assert.equal(ev.resource, raw.resource);
  // 'lost' is per Lock: only the tracked one.
  assert.deepEqual(lost, [tracked]);
  assert.equal(tracked.lost, true);
  await waitQuorum();
});

test('using(): the routine sees its signal abort when the lock is lost', async () => {
  const c = client();
  const r = uniq('using-lost');
  let reason = null;
  await c.using(r, { ttlMs: 600 }, async (signal) => {
    pause3();
    try {
      await new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error('signal did not abort within 5 s')), 5000);
        signal.addEventListener('abort', () => {
          clearTimeout(t);
          resolve();
        });
      });
      reason = signal.reason;
    } finally {
      resumeAll();
    }
  });
  assert.ok(reason instanceof LostError);
});

test('no quorum: NoQuorumError from acquire, health shows the nodes down', async () => {
  const c = client();
  pause3();
  try {
    const t0 = Date.now();
    await assert.rejects(c.acquire(uniq('nq'), { ttlMs: 1000 }), (e) => {
      assert.ok(e instanceof NoQuorumError, String(e));
      assert.equal(e.code, 'no_quorum');
      return true;
    });
    assert.ok(Date.now() - t0 < 3000);
    // The daemon notices the silent nodes (their commands time out, the
    // connections drop); health then says so, without throwing.
    const deadline = Date.now() + 8000;
    let h;
    for (;;) {
      h = await c.health();
      if (h.ok === false || Date.now() > deadline) break;
      await sleep(100);
    }
    assert.equal(h.ok, false, `health still ok with 3 of 5 nodes stopped: ${JSON.stringify(h)}`);
    assert.equal(h.error.code, 'no_quorum');
    assert.equal(h.quorum, 3);
    assert.ok(h.nodes.filter((n) => !n.up).length >= 3, JSON.stringify(h));
  } finally {
    resumeAll();
  }
  await waitQuorum();
  const lock = await c.acquire(uniq('nq'), { ttlMs: 1000 });
  await lock.release();
});

test('two pauses out of five do not matter', async () => {
  const c = client();
  const other = client();
  const r = uniq('two');
  redis.nodes[3].pause();
  redis.nodes[4].pause();
  try {
    const lock = await c.acquire(r, { ttlMs: 600, renew: true });
    await sleep(1200);
    assert.equal(lock.signal.aborted, false);
    await assert.rejects(other.acquire(r), BusyError);
    await lock.release();
  } finally {
    resumeAll();
  }
});
