// Leader election (client.campaign / runAsLeader): one leader at a time
// across processes and two daemons over the same five redis-servers,
// handover after a kill, a clean resign handing over at once, bounded
// rounds, and the loss of leadership reaching user code.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { BusyError, LostError, RedlockClient } from '../index.js';
import { sleep, startDaemon, startRedisNodes, tmpDir, uniq } from '../test-helpers/daemon.js';

const WORKER = path.join(path.dirname(fileURLToPath(import.meta.url)), '../test-helpers/leader-worker.js');

let dir;
let redis;
let d1;
let d2;
const clients = [];
const procs = [];
function client(sock) {
  const c = new RedlockClient({ path: sock });
  clients.push(c);
  return c;
}

before(async () => {
  dir = tmpDir('leader');
  redis = await startRedisNodes(dir, 5);
  d1 = await startDaemon({ nodes: redis.socks, dir: tmpDir('leader1') });
  d2 = await startDaemon({ nodes: redis.socks, dir: tmpDir('leader2') });
});

after(async () => {
  for (const n of redis?.nodes ?? []) if (n.c.paused) n.resume();
  for (const p of procs) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  for (const d of [d1, d2]) if (d && !d.exited) await d.stop();
  await redis?.stop();
  for (const d of [dir, d1?.dir, d2?.dir]) if (d) rmSync(d, { recursive: true, force: true });
});

function worker(out, sock, resource, terms, holdMs, ttlMs) {
  const p = spawn(process.execPath, [WORKER, sock, resource, out, String(terms), String(holdMs), String(ttlMs)], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  p.done = new Promise((resolve) => p.once('exit', (code, sig) => resolve(code ?? sig)));
  procs.push(p);
  return p;
}

function terms(out) {
  let text = '';
  try {
    text = readFileSync(out, 'utf8');
  } catch {
    return [];
  }
  const open = new Map();
  const done = [];
  for (const ln of text.split('\n').filter(Boolean).map((l) => l.split(' '))) {
    if (ln[0] === 'start') open.set(ln[3], { start: BigInt(ln[1]), fence: BigInt(ln[2]), pid: ln[3] });
    else done.push({ ...open.get(ln[2]), end: BigInt(ln[1]) }), open.delete(ln[2]);
  }
  for (const t of open.values()) done.push({ ...t, end: null });
  return done.sort((a, b) => (a.start < b.start ? -1 : 1));
}

async function waitFor(fn, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (fn()) return;
    await sleep(10);
  }
  throw new Error('timed out');
}

describe('leader election', () => {
  test('one leader at a time across processes and two daemons; resign hands over at once', async () => {
    const out = path.join(dir, 'terms-a.log');
    const res = uniq('leader');
    const ttl = 5000;
    for (const sock of [d1.sock, d2.sock, d1.sock, d2.sock]) worker(out, sock, res, 3, 150, ttl);
    const codes = await Promise.all(procs.slice(-4).map((p) => p.done));
    assert.deepEqual(codes, [0, 0, 0, 0]);
    const t = terms(out);
    assert.equal(t.length, 12);
    assert.equal(new Set(t.map((x) => x.pid)).size, 4);
    for (let i = 1; i < t.length; i++) {
      assert.ok(t[i].start >= t[i - 1].end, `overlap: ${JSON.stringify(t.slice(i - 1, i + 1), (k, v) => (typeof v === 'bigint' ? String(v) : v))}`);
      assert.ok(t[i].fence > t[i - 1].fence, 'fences grow with every term');
      // A clean resign wakes the next standby; it does not wait for the ttl.
      assert.ok(Number(t[i].start - t[i - 1].end) / 1e6 < ttl / 2);
    }
  });

  test('handover after the leader process is killed, within the ttl', async () => {
    const out = path.join(dir, 'terms-b.log');
    const res = uniq('kill');
    const ttl = 2000;
    const a = worker(out, d1.sock, res, 1, -1, ttl);
    await waitFor(() => terms(out).length === 1, 20_000);
    worker(out, d2.sock, res, 1, 100, ttl);
    await sleep(300);
    assert.equal(terms(out).length, 1);
    const tKill = process.hrtime.bigint();
    a.kill('SIGKILL');
    await waitFor(() => terms(out).length === 2, 20_000);
    const gapMs = Number(terms(out)[1].start - tKill) / 1e6;
    assert.ok(gapMs >= 0 && gapMs < ttl, `handover took ${gapMs} ms`);
  });

  test('campaign waits in bounded rounds, times out with BusyError, aborts', async () => {
    const res = uniq('rounds');
    const holder = client(d1.sock);
    const c = client(d1.sock);
    const lk = await holder.acquire(res, { ttlMs: 5000 });
    setTimeout(() => holder.release(lk), 600);
    const t0 = Date.now();
    const term = await c.campaign(res, { ttlMs: 2000, roundMs: 100 });
    assert.ok(Date.now() - t0 >= 500);
    assert.equal(typeof term.fence, 'bigint');
    await term.resign();
    const lk2 = await holder.acquire(res, { ttlMs: 5000 });
    await assert.rejects(c.campaign(res, { roundMs: 100, timeoutMs: 350 }), BusyError);
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('stop campaigning')), 200);
    await assert.rejects(c.campaign(res, { signal: ac.signal }), /stop campaigning/);
    await holder.release(lk2);
    assert.equal(await c.runAsLeader(res, (signal, t) => typeof t.fence), 'bigint');
  });

  test('lost leadership aborts the signal and rejects runAsLeader at once', async () => {
    const c = client(d1.sock);
    let aborted = null;
    const run = c.runAsLeader(uniq('lost'), { ttlMs: 1000 }, async (signal) => {
      for (const n of redis.nodes.slice(0, 3)) n.pause();
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      aborted = signal.reason;
      await new Promise(() => {}); // ignores the signal: runAsLeader must not wait
    });
    try {
      await assert.rejects(run, LostError);
    } finally {
      for (const n of redis.nodes) if (n.c.paused) n.resume();
    }
    assert.ok(aborted instanceof LostError);
  });
});
