// sequentialize (grammY/Telegraf, one implementation): updates of one chat
// never overlap across two bot processes (a real grammY bot and a real
// Telegraf bot on the same chats), other chats run in parallel; the lock is
// in ctx.lock, and losing it aborts ctx.lock.signal and fails the update.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { LostError, RedlockClient } from '../index.js';
import { BOT_INFO, messageUpdate, startDaemon, startRedisNodes, tmpDir } from '../test-helpers/daemon.js';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BOT = path.join(HERE, '../test-helpers/seq-bot.js');

let grammy = null;
let telegraf = null;
try {
  grammy = await import('grammy');
  telegraf = await import('telegraf');
} catch {
  /* not installed */
}
const skip = grammy && telegraf ? false : 'grammy/telegraf not installed: run `npm ci` in clients/node';

function runBot(framework, sock, chats, first) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [BOT, framework, sock, chats, '3', '200', String(first)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    p.stdout.setEncoding('utf8').on('data', (d) => (out += d));
    const t = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.once('exit', (code) => {
      clearTimeout(t);
      if (code !== 0) reject(new Error(`${framework} bot exited ${code}`));
      else resolve(JSON.parse(out));
    });
  });
}

const overlaps = (a, b) => BigInt(a.start) < BigInt(b.end) && BigInt(b.start) < BigInt(a.end);

describe('sequentialize across processes', { skip }, () => {
  let daemon;
  before(async () => {
    daemon = await startDaemon();
  });
  after(async () => {
    await daemon?.stop();
  });

  test('same chat never overlaps across a grammY and a Telegraf process; other chats in parallel', async () => {
    const base = 900_000_000 + (process.pid % 1000) * 1000;
    const chats = `${base + 1},${base + 2}`;
    const seen = (await Promise.all([runBot('grammy', daemon.sock, chats, 1), runBot('telegraf', daemon.sock, chats, 100)])).flat();
    assert.equal(seen.length, 12);
    for (const chat of [base + 1, base + 2]) {
      const mine = seen.filter((s) => s.chat === chat).sort((a, b) => (BigInt(a.start) < BigInt(b.start) ? -1 : 1));
      assert.equal(new Set(mine.map((s) => s.pid)).size, 2, 'both processes handled the chat');
      assert.ok(mine.every((s) => s.resource === `tg:chat:${BOT_INFO.id}:${chat}`));
      for (let i = 1; i < mine.length; i++) {
        assert.ok(!overlaps(mine[i - 1], mine[i]), `chat ${chat}: updates overlap`);
        assert.ok(BigInt(mine[i].fence) > BigInt(mine[i - 1].fence));
      }
    }
    const ones = seen.filter((s) => s.chat === base + 1);
    const twos = seen.filter((s) => s.chat === base + 2);
    assert.ok(ones.some((a) => twos.some((b) => overlaps(a, b))), 'other chats ran in parallel');
  });
});

describe('the lock in the handler and its loss', { skip }, () => {
  let dir;
  let redis;
  let daemon;
  let client;
  before(async () => {
    dir = tmpDir('seqlost');
    redis = await startRedisNodes(dir, 5);
    daemon = await startDaemon({ nodes: redis.socks, dir });
    client = new RedlockClient({ path: daemon.sock });
  });
  after(async () => {
    for (const n of redis?.nodes ?? []) if (n.c.paused) n.resume();
    await client?.close();
    await daemon?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [name, mwName] of [
    ['sequentialize', 'sequentialize'],
    ['dedupMiddleware', 'dedupMiddleware'],
  ]) {
    test(`grammY + ${name}: ctx.lock.signal aborts and the update fails with LostError`, async () => {
      const mod = await import('../grammy.js');
      const bot = new grammy.Bot('123456789:FAKE-token-for-tests', {
        botInfo: BOT_INFO,
        client: { apiRoot: 'http://127.0.0.1:9' },
      });
      const opts = mwName === 'dedupMiddleware' ? { ttlMs: 1000, renew: true } : { ttlMs: 1000 };
      bot.use(mod[mwName](client, opts));
      let reason = null;
      bot.on('message', async (ctx) => {
        assert.equal(typeof ctx.lock.token, 'string');
        for (const n of redis.nodes.slice(0, 3)) n.pause();
        await new Promise((resolve) => ctx.lock.signal.addEventListener('abort', resolve, { once: true }));
        reason = ctx.lock.signal.reason;
        await new Promise(() => {}); // never ends: the middleware must not wait for it
      });
      try {
        await assert.rejects(bot.handleUpdate(messageUpdate(Date.now() % 1e9)), (err) => err.error instanceof LostError);
      } finally {
        for (const n of redis.nodes) if (n.c.paused) n.resume();
      }
      assert.ok(reason instanceof LostError);
      // Let the nodes come back before the next test.
      for (let i = 0; i < 100 && !(await client.health()).ok; i++) await new Promise((r) => setTimeout(r, 100));
    });
  }

  test('sequentialize refuses a wait the daemon would refuse', async () => {
    const { sequentialize } = await import('../sequentialize.js');
    assert.throws(() => sequentialize(client, { waitMs: 300_001 }), RangeError);
    assert.throws(() => sequentialize(client, { key: 'chat' }), TypeError);
  });

  test('Telegraf + sequentialize: ctx.lock is the chat lock with a fence', async () => {
    const mod = await import('../telegraf.js');
    const bot = new telegraf.Telegraf('123456789:FAKE-token-for-tests', { telegram: { apiRoot: 'http://127.0.0.1:9' } });
    bot.botInfo = BOT_INFO;
    bot.catch((err) => {
      throw err;
    });
    bot.use(mod.sequentialize(client));
    let seen = null;
    bot.on('message', (ctx) => {
      seen = { resource: ctx.lock.resource, fence: typeof ctx.lock.fence, aborted: ctx.lock.signal.aborted };
    });
    await bot.handleUpdate(messageUpdate(Date.now() % 1e9));
    assert.deepEqual(seen, { resource: `tg:chat:${BOT_INFO.id}:4242`, fence: 'bigint', aborted: false });
  });
});
