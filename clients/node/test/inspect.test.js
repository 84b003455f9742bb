// locks(), iterLocks() and inspect() against a real redlockd --dev.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { BadRequestError, NoQuorumError, RedlockClient } from '../index.js';
import { startDaemon, uniq } from '../test-helpers/daemon.js';

let daemon;
let client;
const big = (_k, v) => (typeof v === 'bigint' ? String(v) : v);

before(async () => {
  daemon = await startDaemon();
  client = new RedlockClient({ path: daemon.sock });
});

after(async () => {
  await client?.close();
  const r = await daemon?.stop();
  assert.deepEqual(r, { code: 0, signal: null }, `daemon exit on SIGTERM\n${daemon?.output()}`);
});

test('locks lists this daemon\'s locks by pages, never a token', async () => {
  const tag = uniq('nls');
  const held = [];
  for (let i = 0; i < 5; i++) held.push(await client.acquire(`${tag}:${i}`, { ttlMs: 20_000, fence: i === 0 }));
  const page = await client.locks({ prefix: `${tag}:`, limit: 2 });
  assert.deepEqual(page.locks.map((e) => e.resource), [`${tag}:0`, `${tag}:1`]);
  assert.equal(page.count, 2);
  assert.equal(typeof page.next, 'string');
  assert.equal(page.locks[0].owner.pid, process.pid);
  assert.equal(page.locks[0].fence, held[0].fence);
  const all = [];
  for await (const e of client.iterLocks({ prefix: `${tag}:`, limit: 2 })) all.push(e.resource);
  assert.deepEqual(all, [0, 1, 2, 3, 4].map((i) => `${tag}:${i}`));
  const text = JSON.stringify(await client.locks({ prefix: `${tag}:` }), big);
  for (const l of held) assert.ok(!text.includes(l.token), text);
  await assert.rejects(client.locks({ limit: 0 }), BadRequestError);
  for (const l of held) await l.release();
  assert.deepEqual((await client.locks({ prefix: `${tag}:` })).locks, []);
});

test('inspect says free, held (mine) and done', async () => {
  const r = uniq('nin');
  assert.equal((await client.inspect(r)).state, 'free');
  const lock = await client.acquire(r, { ttlMs: 20_000, fence: true });
  const info = await client.inspect(r, { fence: true });
  assert.equal(info.state, 'held');
  assert.equal(info.mine, true);
  assert.ok(info.agree >= 3 && info.pttl_ms > 0 && info.pttl_ms <= 20_000, JSON.stringify(info, big));
  assert.ok(info.fence >= lock.fence);
  assert.ok(!JSON.stringify(info, big).includes(lock.token));
  await lock.complete({ keepMs: 5000 });
  const done = await client.inspect(r);
  assert.equal(done.state, 'done');
  assert.equal(done.mine, false);
  assert.ok(NoQuorumError);
});

test('permits: a semaphore of 2, released through another client by permit', async () => {
  const r = uniq('nsem');
  const a = await client.acquire(r, { permits: 2, ttlMs: 20_000 });
  const b = await client.acquire(r, { permits: 2, ttlMs: 20_000 });
  assert.deepEqual([a.permit, b.permit].sort(), [0, 1]);
  await assert.rejects(client.acquire(r, { permits: 2 }), (e) => e.code === 'busy');
  const other = new RedlockClient({ path: daemon.sock });
  try {
    await other.release({ token: a.token, resource: r, permit: a.permit });
    const c = await other.acquire(r, { permits: 2, ttlMs: 5000 });
    assert.equal(c.permit, a.permit);
    await c.release();
  } finally {
    await other.close();
  }
  await client.extend(b, 30_000);
  await b.release();
  assert.deepEqual((await client.locks({ prefix: r })).locks, []);
});
