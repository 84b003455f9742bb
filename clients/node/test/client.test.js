// The client against a real redlockd --dev (5 throw-away redis-servers).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  BadRequestError,
  BusyError,
  ClientClosedError,
  ConnectionLostError,
  DoneError,
  Lock,
  LostError,
  NotHeldError,
  RedlockClient,
  RedlockError,
  RequestTimeoutError,
  TooLargeError,
} from '../index.js';
import { createDedup } from '../dedup.js';
import { dedupMiddleware, sequentialize } from '../middleware.js';
import { rawCall, sleep, startDaemon, uniq } from '../test-helpers/daemon.js';

let daemon;
const clients = [];
function client(opts = {}) {
  const c = new RedlockClient({ path: daemon.sock, ...opts });
  clients.push(c);
  return c;
}

before(async () => {
  daemon = await startDaemon();
});

after(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  const r = await daemon?.stop();
  assert.deepEqual(r, { code: 0, signal: null }, `daemon exit on SIGTERM\n${daemon?.output()}`);
});

describe('basics', () => {
  test('ping and health', async () => {
    const c = client();
    assert.equal(c.connected, false, 'lazy: no connection before the first call');
    const rtt = await c.ping();
    assert.equal(typeof rtt, 'number');
    assert.ok(rtt >= 0 && rtt < 2000);
    assert.equal(c.connected, true);
    const h = await c.health();
    assert.equal(h.ok, true);
    assert.equal(h.quorum, 3);
    assert.equal(h.nodes.length, 5);
    assert.ok(h.nodes.every((n) => n.up === true && typeof n.addr === 'string'));
    assert.equal('id' in h, false);
  });

  test('default path comes from REDLOCKD_SOCKET, else ./redlockd.sock', () => {
    const saved = process.env.REDLOCKD_SOCKET;
    try {
      process.env.REDLOCKD_SOCKET = '/tmp/x/env.sock';
      assert.equal(new RedlockClient().path, '/tmp/x/env.sock');
      delete process.env.REDLOCKD_SOCKET;
      assert.equal(new RedlockClient().path, './redlockd.sock');
      assert.equal(new RedlockClient({ path: '/p.sock' }).path, '/p.sock');
      // Set but empty (compose's `REDLOCKD_SOCKET: ${SOCK}` with SOCK
      // unset) is unset, as for the Python and Go clients and redlockctl:
      // an empty path made node connect over TCP to 127.0.0.1.
      process.env.REDLOCKD_SOCKET = '';
      assert.equal(new RedlockClient().path, './redlockd.sock');
      assert.equal(new RedlockClient({ path: '' }).path, './redlockd.sock');
    } finally {
      if (saved === undefined) delete process.env.REDLOCKD_SOCKET;
      else process.env.REDLOCKD_SOCKET = saved;
    }
  });

  test('acquire, release; the resource is free again', async () => {
    const c = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 5000 });
    assert.ok(lock instanceof Lock);
    assert.match(lock.token, /^[0-9a-f]{32}$/);
    assert.equal(lock.resource, r);
    assert.ok(lock.validityMs > 4800 && lock.validityMs <= 5000, `validity ${lock.validityMs}`);
    assert.equal(lock.fence, undefined);
    assert.ok(lock.signal instanceof AbortSignal);
    assert.equal(lock.signal.aborted, false);
    assert.ok(Math.abs(lock.expiresAt - (Date.now() + lock.validityMs)) < 1000);
    assert.deepEqual(JSON.parse(JSON.stringify(lock)), {
      token: lock.token,
      resource: r,
      validityMs: lock.validityMs,
    });
    await c.release(lock);
    // Releasing again: the daemon no longer knows it.
    await assert.rejects(c.release(lock), NotHeldError);
    const again = await c.acquire(r, { ttlMs: 5000 });
    await again.release();
  });

  test('busy while held by another owner', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const lock = await a.acquire(r, { ttlMs: 5000 });
    const err = await b.acquire(r).then(
      () => assert.fail('acquired a held resource'),
      (e) => e,
    );
    assert.ok(err instanceof BusyError);
    assert.ok(err instanceof RedlockError);
    assert.equal(err.code, 'busy');
    assert.equal(err.name, 'BusyError');
    // The same connection is another acquisition too: busy as well.
    await assert.rejects(a.acquire(r), BusyError);
    await a.release(lock);
  });

  test('complete: done for later acquires, and the lock is dropped', async () => {
    const c = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 5000 });
    await c.complete(lock, { keepMs: 60_000 });
    await assert.rejects(c.acquire(r), (e) => e instanceof DoneError && e.code === 'done');
    // done stops a waiter at once instead of waiting it out.
    const t0 = Date.now();
    await assert.rejects(c.acquire(r, { waitMs: 3000 }), DoneError);
    assert.ok(Date.now() - t0 < 1500, 'done does not wait');
    await assert.rejects(c.release(lock), NotHeldError);
  });

  test('complete with a short keepMs: the mark expires', async () => {
    const c = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 5000 });
    await lock.complete({ keepMs: 200 });
    await assert.rejects(c.acquire(r), DoneError);
    await sleep(400);
    const again = await c.acquire(r, { ttlMs: 1000 });
    await again.release();
  });

  test('extend pushes the expiry out', async () => {
    const c = client();
    const other = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 300 });
    const same = await c.extend(lock, 3000);
    assert.equal(same, lock);
    assert.ok(lock.validityMs > 2800 && lock.validityMs <= 3000, `validity ${lock.validityMs}`);
    await sleep(500); // past the original TTL
    await assert.rejects(other.acquire(r), BusyError);
    // Without a TTL: the lock's own TTL.
    await lock.extend();
    assert.ok(lock.validityMs > 200 && lock.validityMs <= 3000);
    await c.release(lock);
  });

  test('extend of an expired lock: NotHeldError and its signal aborts', async () => {
    const c = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 50 });
    await sleep(200);
    await assert.rejects(c.extend(lock, 1000), NotHeldError);
    assert.equal(lock.signal.aborted, true);
    assert.ok(lock.signal.reason instanceof LostError);
    await assert.rejects(c.complete(lock), NotHeldError);
  });

  test('fencing tokens strictly increase (bigint)', async () => {
    const c = client();
    const r = uniq();
    let prev = -1n;
    for (let i = 0; i < 5; i++) {
      const lock = await c.acquire(r, { ttlMs: 2000, fence: true });
      assert.equal(typeof lock.fence, 'bigint');
      assert.ok(lock.fence > prev, `fence ${lock.fence} after ${prev}`);
      prev = lock.fence;
      assert.equal(JSON.parse(JSON.stringify(lock)).fence, String(lock.fence));
      await lock.release();
    }
    // Another resource and another connection still see larger tokens.
    const other = await client().acquire(uniq(), { fence: true, ttlMs: 2000 });
    assert.ok(other.fence > prev);
    await other.release();
  });

  test('waitMs: a waiter gets the lock when it is released', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 10_000 });
    const t0 = Date.now();
    const waiting = b.acquire(r, { ttlMs: 5000, waitMs: 5000 });
    await sleep(300);
    await a.release(held);
    const lock = await waiting;
    const took = Date.now() - t0;
    assert.ok(took >= 250 && took < 2500, `waited ${took} ms`);
    await lock.release();
  });

  test('waitMs: busy after the wait runs out', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 10_000 });
    const t0 = Date.now();
    await assert.rejects(b.acquire(r, { waitMs: 300 }), BusyError);
    const took = Date.now() - t0;
    assert.ok(took >= 250 && took < 2500, `gave up after ${took} ms`);
    await held.release();
  });

  test('waitMs: a waiter gets the lock when it expires', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    await a.acquire(r, { ttlMs: 300 });
    const lock = await b.acquire(r, { ttlMs: 2000, waitMs: 3000 });
    await lock.release();
  });

  test('renew keeps a 300 ms lock held for 1.5 s', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const lock = await a.acquire(r, { ttlMs: 300, renew: true });
    assert.equal(lock.renew, true);
    const deadline = Date.now() + 1500;
    while (Date.now() < deadline) {
      await assert.rejects(b.acquire(r), BusyError);
      await sleep(100);
    }
    assert.equal(lock.signal.aborted, false);
    await a.release(lock);
    const next = await b.acquire(r, { ttlMs: 1000 });
    await next.release();
  });

  test('renewMaxMs: renewal stops, the lock then expires', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const lost = [];
    a.on('lost', (l) => lost.push(l));
    await a.acquire(r, { ttlMs: 200, renew: true, renewMaxMs: 400 });
    await sleep(300);
    await assert.rejects(b.acquire(r), BusyError); // still renewed at 300 ms
    const lock = await b.acquire(r, { ttlMs: 1000, waitMs: 2000 });
    await lock.release();
    assert.deepEqual(lost, [], 'running out of renewMaxMs is not a loss');
  });

  test('without renew a short lock expires', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    await a.acquire(r, { ttlMs: 200 });
    await sleep(400);
    const lock = await b.acquire(r, { ttlMs: 1000 });
    await lock.release();
  });
});

describe('pipelining', () => {
  test('200 concurrent requests on one connection, matched by id', async () => {
    const c = client();
    const base = uniq('pipe');
    const names = Array.from({ length: 200 }, (_, i) => `${base}:${i}`);
    const ops = names.map((name, i) =>
      i % 4 === 3 ? c.ping().then(() => name) : c.acquire(name, { ttlMs: 10_000 }),
    );
    const results = await Promise.all(ops);
    const locks = results.filter((x) => x instanceof Lock);
    assert.equal(locks.length, 150);
    results.forEach((x, i) => {
      if (x instanceof Lock) assert.equal(x.resource, names[i]);
      else assert.equal(x, names[i]);
    });
    assert.equal(new Set(locks.map((l) => l.token)).size, 150);
    // A second burst: 150 releases plus 50 busy acquires, concurrently.
    const other = client();
    const second = await Promise.allSettled([
      ...locks.slice(0, 50).map((l) => other.acquire(l.resource)),
      ...locks.map((l) => c.release(l)),
    ]);
    // The acquires raced the releases: each is either busy or won.
    for (const s of second.slice(0, 50)) {
      if (s.status === 'rejected') assert.ok(s.reason instanceof BusyError, String(s.reason));
      else await s.value.release();
    }
    assert.ok(second.slice(50).every((s) => s.status === 'fulfilled'));
  });
});

describe('sessions and connections', () => {
  test('locks are released when the connection closes', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const lock = await a.acquire(r, { ttlMs: 60_000 });
    const lost = [];
    a.on('lost', (l, e) => lost.push([l, e]));
    await a.close();
    assert.equal(lock.signal.aborted, true, 'close aborts the signal of held locks');
    assert.ok(lock.signal.reason instanceof LostError);
    assert.equal(lost.length, 1);
    const t0 = Date.now();
    const again = await b.acquire(r, { ttlMs: 1000, waitMs: 2000 });
    assert.ok(Date.now() - t0 < 1000, 'released at once, not at expiry');
    await again.release();
    await assert.rejects(a.ping(), ClientClosedError);
  });

  test('a daemon that is not there: ConnectionLostError', async () => {
    const c = client({ path: `${daemon.dir}/nobody.sock` });
    await assert.rejects(c.ping(), ConnectionLostError);
    await assert.rejects(c.ping(), ConnectionLostError);
  });

  test('an idle client does not keep the process alive', async () => {
    // A script that pings and holds a lock but never calls close() must
    // still exit by itself (the daemon then releases its lock).
    const index = new URL('../index.js', import.meta.url).href;
    const r = uniq();
    const script = `
      import { RedlockClient } from ${JSON.stringify(index)};
      const c = new RedlockClient({ path: ${JSON.stringify(daemon.sock)} });
      await c.ping();
      await c.acquire(${JSON.stringify(r)}, { ttlMs: 60000 });
      console.log('done');
    `;
    const { spawn } = await import('node:child_process');
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    const code = await new Promise((resolve) => {
      const t = setTimeout(() => {
        child.kill('SIGKILL');
        resolve('hung');
      }, 5000);
      child.on('exit', (c) => {
        clearTimeout(t);
        resolve(c);
      });
    });
    assert.equal(code, 0, out);
    assert.match(out, /done/);
    const lock = await client().acquire(r, { ttlMs: 1000, waitMs: 2000 });
    await lock.release();
  });

  test('the HTTP side sees NDJSON session locks as held', async () => {
    const c = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 5000 });
    const ans = await rawCall(daemon.sock, { op: 'acquire', resource: r });
    assert.equal(ans.ok, false);
    assert.equal(ans.error.code, 'busy');
    await lock.release();
  });
});

describe('close() with requests in flight', () => {
  test('in-flight requests reject with ClientClosedError; an acquire yields no Lock', async () => {
    const c = client();
    const other = client();
    await c.ping();
    const r = uniq('close-inflight');
    const lost = [];
    c.on('lost', (l) => lost.push(l));
    // Both are written before close(); their answers can only be read after.
    const acq = c.acquire(r, { ttlMs: 20_000 }).then(
      (lock) => ({ lock }),
      (err) => ({ err }),
    );
    const ping = c.ping().then(
      () => ({}),
      (err) => ({ err }),
    );
    const t0 = Date.now();
    await c.close();
    assert.ok(Date.now() - t0 < 500, `close() took ${Date.now() - t0} ms`);
    const a = await acq;
    assert.equal(a.lock, undefined, 'close() handed out a Lock the daemon releases with the connection');
    assert.ok(a.err instanceof ClientClosedError, String(a.err));
    const p = await ping;
    assert.ok(p.err instanceof ClientClosedError, String(p.err));
    await sleep(100); // a grant that still arrives is dropped quietly
    assert.equal(lost.length, 0, 'no Lock was handed out, so none is reported lost');
    // The daemon released whatever it granted on that connection.
    const t1 = Date.now();
    const lock = await other.acquire(r, { ttlMs: 1000, waitMs: 3000 });
    assert.ok(Date.now() - t1 < 2000);
    await lock.release();
    await assert.rejects(c.ping(), ClientClosedError);
  });

  test('using() does not run its routine when close() comes first', async () => {
    const c = client();
    await c.ping();
    let ran = false;
    const u = c
      .using(uniq('close-using'), { ttlMs: 20_000 }, () => {
        ran = true;
      })
      .then(
        () => null,
        (err) => err,
      );
    await c.close();
    const err = await u;
    await sleep(100);
    assert.equal(ran, false, 'the routine ran under a lock that close() dropped');
    assert.ok(err instanceof ClientClosedError, String(err));
  });

  test('close() does not wait for a waiting acquire', async () => {
    const holder = client();
    const c = client();
    const r = uniq('close-waiting');
    const held = await holder.acquire(r, { ttlMs: 20_000 });
    await c.ping();
    const waiting = c.acquire(r, { waitMs: 5000 }).then(
      (lock) => ({ lock }),
      (err) => ({ err }),
    );
    await sleep(50); // the daemon has queued the waiter
    const t0 = Date.now();
    await c.close();
    const took = Date.now() - t0;
    const w = await waiting;
    assert.ok(w.err instanceof ClientClosedError, String(w.err ?? w.lock));
    assert.ok(took < 500, `close() took ${took} ms with a waiter in flight`);
    // The daemon dropped the waiter with its connection: the resource goes
    // to the next client once the holder lets go.
    await held.release();
    const other = client();
    const lock = await other.acquire(r, { ttlMs: 1000, waitMs: 3000 });
    await lock.release();
  });

  test('close() does not wait for an acquire given up on (aborted) either', async () => {
    const holder = client();
    const c = client();
    const r = uniq('close-aborted');
    const held = await holder.acquire(r, { ttlMs: 20_000 });
    const ac = new AbortController();
    const waiting = c.acquire(r, { waitMs: 5000, signal: ac.signal });
    await sleep(50);
    ac.abort(new Error('gave up'));
    await assert.rejects(waiting, /gave up/);
    const t0 = Date.now();
    await c.close();
    assert.ok(Date.now() - t0 < 500, `close() took ${Date.now() - t0} ms`);
    await held.release();
  });

  test('close() twice, concurrently: both resolve', async () => {
    const c = client();
    await c.ping();
    const p = c.ping().catch((e) => e);
    const t0 = Date.now();
    await Promise.all([c.close(), c.close()]);
    assert.ok(Date.now() - t0 < 500, `close() took ${Date.now() - t0} ms`);
    assert.ok((await p) instanceof ClientClosedError);
    await c.close(); // and once more, after the fact
  });
});

describe('timeouts and abort', () => {
  test('an aborted acquire rejects with the reason; a late grant is released', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 10_000 });
    const ac = new AbortController();
    const p = b.acquire(r, { waitMs: 5000, signal: ac.signal });
    await sleep(100);
    ac.abort(new Error('gave up'));
    await assert.rejects(p, /gave up/);
    // The daemon still has the waiter; it is granted on release, then the
    // client lets it go by itself.
    await a.release(held);
    const deadline = Date.now() + 3000;
    let got = null;
    while (!got && Date.now() < deadline) {
      try {
        got = await a.acquire(r, { ttlMs: 1000 });
      } catch (e) {
        assert.ok(e instanceof BusyError);
        await sleep(50);
      }
    }
    assert.ok(got, 'the abandoned grant was released');
    await got.release();
  });

  test('an already aborted signal rejects at once', async () => {
    const c = client();
    await assert.rejects(c.acquire(uniq(), { signal: AbortSignal.abort() }), { name: 'AbortError' });
  });

  test('request timeout: RequestTimeoutError; a late grant is released', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 10_000 });
    const t0 = Date.now();
    await assert.rejects(b.acquire(r, { waitMs: 3000, timeoutMs: 200 }), (e) => {
      assert.ok(e instanceof RequestTimeoutError);
      assert.equal(e.code, 'timeout');
      return true;
    });
    const took = Date.now() - t0;
    assert.ok(took >= 150 && took < 1500, `timed out after ${took} ms`);
    await held.release();
    const deadline = Date.now() + 3000;
    let got = null;
    while (!got && Date.now() < deadline) {
      got = await a.acquire(r, { ttlMs: 1000 }).catch(() => sleep(50).then(() => null));
    }
    assert.ok(got, 'the grant that came after the timeout was released');
    await got.release();
  });

  test('the client-wide timeout leaves room for waitMs', async () => {
    const a = client();
    const b = client({ timeoutMs: 300 });
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 10_000 });
    const p = b.acquire(r, { waitMs: 3000 });
    await sleep(600); // past timeoutMs, within timeoutMs + waitMs
    await held.release();
    const lock = await p;
    await lock.release();
  });
});

describe('using()', () => {
  test('runs the routine under the lock and releases it', async () => {
    const c = client();
    const other = client();
    const r = uniq();
    const out = await c.using(r, { ttlMs: 300 }, async (signal, lock) => {
      assert.ok(signal instanceof AbortSignal);
      assert.equal(lock.renew, true, 'using renews by default');
      await sleep(500); // beyond the TTL: renewed
      await assert.rejects(other.acquire(r), BusyError);
      return 42;
    });
    assert.equal(out, 42);
    const again = await other.acquire(r);
    await again.release();
  });

  test('releases on error and rethrows it', async () => {
    const c = client();
    const r = uniq();
    await assert.rejects(
      c.using(r, async () => {
        throw new Error('boom');
      }),
      /boom/,
    );
    const again = await c.acquire(r);
    await again.release();
  });

  test('busy resource: the routine does not run', async () => {
    const a = client();
    const b = client();
    const r = uniq();
    const held = await a.acquire(r, { ttlMs: 5000 });
    let ran = false;
    await assert.rejects(
      b.using(r, async () => {
        ran = true;
      }),
      BusyError,
    );
    assert.equal(ran, false);
    await held.release();
  });
});

describe('client-side checks (nothing sent that would drop the connection)', () => {
  test('bad resources reject with BadRequestError', async () => {
    const c = client();
    const lock = await c.acquire(uniq(), { ttlMs: 5000 });
    for (const bad of ['', 'x'.repeat(513), 'a\nb', 'a\u0085b', '\ud800', 42, null]) {
      await assert.rejects(c.acquire(bad), BadRequestError, `resource ${JSON.stringify(bad)}`);
    }
    assert.equal(lock.signal.aborted, false, 'the connection and its locks survived');
    await assert.rejects(c.release({ token: 'nope', resource: 'r' }), BadRequestError);
    await assert.rejects(c.release(null), BadRequestError);
    // 512 bytes of 3-byte characters is too many; 170 of them fit.
    await assert.rejects(c.acquire('€'.repeat(171)), BadRequestError);
    const ok = await c.acquire('€'.repeat(170) + uniq('').slice(0, 2), { ttlMs: 1000 }).catch((e) => e);
    assert.ok(ok instanceof Lock, String(ok));
    await ok.release();
    await lock.release();
  });

  test('options that are not an object are refused, not ignored', async () => {
    // acquire(r, 5000) is node-redlock's call, and complete(lock, keep) the
    // Python and Go clients'; ignoring the number would take the defaults.
    const c = client();
    const r = uniq();
    await assert.rejects(c.acquire(r, 5000), { name: 'BadRequestError', message: /acquire: options must be an object/ });
    await assert.rejects(c.using(r, 5000, async () => 'ran'), /using: options must be an object/);
    await assert.rejects(c.campaign(r, 5000), /campaign: options must be an object/);
    // The Python and Go clients take the path itself; here it would be
    // ignored for ./redlockd.sock.
    assert.throws(() => new RedlockClient(daemon.sock), {
      name: 'BadRequestError',
      message: /new RedlockClient: options must be an object such as \{ path: /,
    });
    const lock = await c.acquire(r, null); // null: the defaults, as undefined
    await assert.rejects(c.complete(lock, 60_000), /complete: options must be an object/);
    await assert.rejects(c.release(lock, 'x'), BadRequestError);
    assert.equal(lock.signal.aborted, false);
    await c.complete(lock, { keepMs: 60_000 });
    await assert.rejects(c.acquire(r), DoneError);
  });

  test('a misspelt option is refused, naming it and the valid ones, and nothing is sent', async () => {
    // { ttl: 5000 } was ignored: the lock held for the daemon's 30 s while
    // the caller believed 5 s. Python refuses an unexpected keyword (a
    // TypeError), Go does not compile; here every call that takes options
    // says which key it does not know.
    const c = client();
    const r = uniq();
    const unknown = (call, key, valid) => ({
      name: 'BadRequestError',
      code: 'bad_request',
      message: `${call}: unknown option '${key}' (valid: ${valid})`,
    });
    const ACQ = 'ttlMs, waitMs, renew, fence, renewMaxMs, permits, timeoutMs, signal';
    await assert.rejects(c.acquire(r, { ttl: 5000 }), unknown('acquire', 'ttl', ACQ));
    await assert.rejects(c.acquire(r, { ttlMs: 5000, wait: 100 }), unknown('acquire', 'wait', ACQ));
    await assert.rejects(c.using(r, { ttl_ms: 5000 }, async () => 'ran'), unknown('using', 'ttl_ms', ACQ));
    await assert.rejects(c.campaign(r, { ttl: 5000 }), unknown('campaign', 'ttl', 'ttlMs, roundMs, signal, timeoutMs'));
    await assert.rejects(
      c.runAsLeader(r, { waitMs: 5000 }, async () => 'ran'),
      unknown('campaign', 'waitMs', 'ttlMs, roundMs, signal, timeoutMs'),
    );
    assert.throws(() => new RedlockClient({ path: daemon.sock, timeout: 5000 }), {
      name: 'BadRequestError',
      message: "new RedlockClient: unknown option 'timeout' (valid: path, timeoutMs, connectTimeoutMs, maxLineBytes)",
    });
    // Nothing of the above reached the daemon: the resource is free.
    assert.equal((await c.inspect(r)).state, 'free');
    const lock = await c.acquire(r, { ttlMs: 5000 });
    await assert.rejects(c.complete(lock, { keep: 60_000 }), unknown('complete', 'keep', 'keepMs, timeoutMs, signal'));
    await assert.rejects(lock.complete({ keep_ms: 60_000 }), unknown('complete', 'keep_ms', 'keepMs, timeoutMs, signal'));
    await assert.rejects(c.extend(lock, 5000, { ttlMs: 5000 }), unknown('extend', 'ttlMs', 'timeoutMs, signal'));
    await assert.rejects(c.release(lock, { timeout: 100 }), unknown('release', 'timeout', 'timeoutMs, signal'));
    await assert.rejects(c.ping({ timeout: 100 }), unknown('ping', 'timeout', 'timeoutMs, signal'));
    await assert.rejects(c.health({ timeout: 100 }), unknown('health', 'timeout', 'timeoutMs, signal'));
    await assert.rejects(c.request({ op: 'ping' }, { timeout: 100 }), unknown('ping', 'timeout', 'timeoutMs, signal'));
    const LOCKS = 'prefix, limit, cursor, timeoutMs, signal';
    await assert.rejects(c.locks({ prefx: 'x' }), unknown('locks', 'prefx', LOCKS));
    await assert.rejects(c.iterLocks({ prefx: 'x' }).next(), unknown('iterLocks', 'prefx', LOCKS));
    await assert.rejects(c.inspect(r, { fenced: true }), unknown('inspect', 'fenced', 'fence, timeoutMs, signal'));
    // The lock was neither completed nor released by any of them.
    assert.equal(lock.signal.aborted, false);
    assert.equal((await c.inspect(r)).state, 'held');
    await lock.release();
  });

  test('the middleware factories refuse a number or a misspelt key as options', () => {
    // dedupMiddleware(client, 60000) and sequentialize(client, 30000) ran
    // with the defaults; { ttl: .. } and { wait: .. } likewise.
    const c = client();
    assert.throws(() => dedupMiddleware(c, 60_000), {
      name: 'BadRequestError',
      message: /^dedup: options must be an object such as \{ ttlMs: 60000 \}, not number 60000$/,
    });
    assert.throws(() => createDedup(c, 60_000), { name: 'BadRequestError' });
    assert.throws(() => sequentialize(c, 30_000), {
      name: 'BadRequestError',
      message: /^sequentialize: options must be an object such as \{ waitMs: 60000 \}, not number 30000$/,
    });
    assert.throws(() => dedupMiddleware(c, { ttl: 60_000 }), {
      name: 'BadRequestError',
      message: "dedup: unknown option 'ttl' (valid: ttlMs, keepMs, key, renew, onDuplicate, onCompleteError, property)",
    });
    assert.throws(() => sequentialize(c, { wait: 1000 }), {
      name: 'BadRequestError',
      message: "sequentialize: unknown option 'wait' (valid: key, ttlMs, waitMs, fence, property)",
    });
    assert.equal(typeof dedupMiddleware(c, { ttlMs: 60_000, keepMs: 1000 }), 'function');
    assert.equal(typeof sequentialize(c, { waitMs: 1000 }), 'function');
  });

  test('timeoutMs 0 is refused, not taken as no timeout; Infinity is no timeout', async () => {
    // 0 (say a deadline - Date.now() that ran out) turned the timeout off
    // and the call could wait for ever.
    const c = client();
    const r = uniq();
    const zero = /timeoutMs must be a number of ms over 0 \(Infinity: no timeout\), not number 0/;
    await assert.rejects(c.acquire(r, { timeoutMs: 0 }), { name: 'BadRequestError', message: zero });
    await assert.rejects(c.ping({ timeoutMs: 0 }), { name: 'BadRequestError', message: zero });
    await assert.rejects(c.ping({ timeoutMs: -5 }), BadRequestError);
    await assert.rejects(c.ping({ timeoutMs: NaN }), BadRequestError);
    await assert.rejects(c.ping({ timeoutMs: '5000' }), BadRequestError);
    await assert.rejects(c.campaign(r, { timeoutMs: 0 }), { name: 'BadRequestError', message: zero });
    assert.throws(() => new RedlockClient({ path: daemon.sock, timeoutMs: 0 }), {
      name: 'BadRequestError',
      message: zero,
    });
    assert.equal((await c.inspect(r)).state, 'free', 'the acquire was not sent');
    const forever = client({ timeoutMs: Infinity });
    assert.ok((await forever.ping()) >= 0);
    const lock = await c.acquire(r, { ttlMs: 5000, timeoutMs: Infinity });
    await lock.release();
  });

  test('a request line over maxLineBytes is refused locally', async () => {
    const c = client();
    await assert.rejects(c.request({ op: 'ping', pad: 'x'.repeat(70_000) }), TooLargeError);
    await c.ping();
  });

  test('the daemon checks the rest: BadRequestError names the field', async () => {
    const c = client();
    const err = await c.acquire(uniq(), { ttlMs: 5 }).catch((e) => e);
    assert.ok(err instanceof BadRequestError);
    assert.equal(err.code, 'bad_request');
    assert.match(err.message, /ttl_ms/);
    await assert.rejects(c.acquire(uniq(), { waitMs: -1 }), /wait_ms/);
    await assert.rejects(c.request({ op: 'frobnicate' }), BadRequestError);
    await c.ping(); // still connected
  });

  test('release/extend/complete of a token with the wrong resource: not_held', async () => {
    const c = client();
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 5000 });
    await assert.rejects(c.release({ token: lock.token, resource: r + ':other' }), NotHeldError);
    await assert.rejects(c.extend({ token: lock.token, resource: r + ':other' }, 1000), NotHeldError);
    // A {token, resource} object works like the Lock.
    const ext = await c.extend({ token: lock.token, resource: r }, 2000);
    assert.ok(ext.validityMs > 1800);
    await c.release({ token: lock.token, resource: r });
  });
});

describe('raw wire checks', () => {
  test('every release/extend/complete carries the resource', async () => {
    // A client that records what it writes.
    const c = client();
    const lines = [];
    const r = uniq();
    const lock = await c.acquire(r, { ttlMs: 5000 });
    // Spy on the socket writes of the live connection.
    const net = await import('node:net');
    const write = net.Socket.prototype.write;
    net.Socket.prototype.write = function spy(data, ...rest) {
      lines.push(String(data));
      return write.call(this, data, ...rest);
    };
    try {
      await c.extend(lock, 5000);
      await c.complete(lock, { keepMs: 1000 });
      const l2 = await c.acquire(uniq(), { ttlMs: 1000 });
      await c.release(l2);
    } finally {
      net.Socket.prototype.write = write;
    }
    const sent = lines.map((l) => JSON.parse(l));
    const ops = sent.filter((m) => ['extend', 'complete', 'release'].includes(m.op));
    assert.equal(ops.length, 3);
    for (const m of ops) {
      assert.equal(typeof m.resource, 'string', JSON.stringify(m));
      assert.match(m.lock, /^[0-9a-f]{32}$/);
      assert.ok(m.id !== undefined);
    }
    assert.deepEqual(Object.keys(sent.find((m) => m.op === 'complete')).sort(), [
      'id',
      'keep_ms',
      'lock',
      'op',
      'resource',
    ]);
  });
});
