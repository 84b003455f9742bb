// One suite for both bot frameworks: `makeBot({client, apiRoot, middleware,
// handler})` builds a real grammY or Telegraf bot (fake token, botInfo
// given, API root on a loopback port we serve) and returns
// `{handleUpdate(update)}`.

import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';

import { DoneError, RedlockClient } from '../index.js';
import { fakeTelegram, messageUpdate, sleep, startDaemon } from './daemon.js';

let nextUpdate = 700_000_000 + (process.pid % 1000) * 1000;

// Guard: every socket this process opens goes to a unix socket or to
// loopback. Anything else is recorded (and refused) here.
const offLoopback = [];
const LOOPBACK = /^(127\.\d+\.\d+\.\d+|localhost|::1|\[::1\])$/;
const origConnect = net.Socket.prototype.connect;
net.Socket.prototype.connect = function guardedConnect(...args) {
  const o = args[0];
  const opts = Array.isArray(o) ? o[0] : typeof o === 'object' && o !== null ? o : { port: o, host: args[1] };
  if (!opts.path && !LOOPBACK.test(String(opts.host ?? 'localhost'))) {
    offLoopback.push(`${opts.host}:${opts.port}`);
    throw new Error(`test guard: connection to ${opts.host}:${opts.port} refused (loopback only)`);
  }
  return origConnect.apply(this, args);
};

export function dedupSuite(name, { skip, makeBot, dedupMiddleware }) {
  describe(`${name}: dedupMiddleware`, { skip }, () => {
    let daemon;
    let api;
    const clients = [];
    const newClient = () => {
      const c = new RedlockClient({ path: daemon.sock });
      clients.push(c);
      return c;
    };

    before(async () => {
      daemon = await startDaemon();
      api = await fakeTelegram();
    });

    after(async () => {
      await Promise.all(clients.map((c) => c.close().catch(() => {})));
      await api?.close();
      await daemon?.stop();
    });

    function setup({ client = newClient(), options = {}, handler } = {}) {
      const seen = [];
      const bot = makeBot({
        client,
        apiRoot: api.apiRoot,
        middleware: dedupMiddleware(client, { ttlMs: 10_000, ...options }),
        handler: async (ctx) => {
          seen.push(ctx.update.update_id);
          if (handler) await handler(ctx);
        },
      });
      return { bot, seen, client };
    }

    test('the same update twice at once: the handler runs once', async () => {
      const { bot, seen } = setup({ handler: () => sleep(200) });
      const u = messageUpdate(++nextUpdate);
      await Promise.all([bot.handleUpdate(u), bot.handleUpdate(structuredClone(u))]);
      assert.deepEqual(seen, [u.update_id]);
    });

    test('the same update again after it was handled: skipped (done)', async () => {
      const skipped = [];
      const { bot, seen } = setup({ options: { onDuplicate: (ctx, err) => skipped.push(err) } });
      const u = messageUpdate(++nextUpdate);
      await bot.handleUpdate(u);
      await bot.handleUpdate(structuredClone(u));
      await bot.handleUpdate(structuredClone(u));
      assert.deepEqual(seen, [u.update_id]);
      assert.equal(skipped.length, 2);
      assert.ok(skipped.every((e) => e instanceof DoneError));
    });

    test('two workers (two bots, two connections) get the same update: once', async () => {
      const w1 = setup({ handler: () => sleep(150) });
      const w2 = setup({ handler: () => sleep(150) });
      const u = messageUpdate(++nextUpdate);
      await Promise.all([w1.bot.handleUpdate(u), w2.bot.handleUpdate(structuredClone(u))]);
      assert.equal(w1.seen.length + w2.seen.length, 1);
      // And later deliveries to either are skipped.
      await w1.bot.handleUpdate(structuredClone(u));
      await w2.bot.handleUpdate(structuredClone(u));
      assert.equal(w1.seen.length + w2.seen.length, 1);
    });

    test('different updates all run', async () => {
      const { bot, seen } = setup();
      const ids = [++nextUpdate, ++nextUpdate, ++nextUpdate];
      await Promise.all(ids.map((id) => bot.handleUpdate(messageUpdate(id))));
      assert.deepEqual([...seen].sort(), [...ids].sort());
    });

    test('a handler that throws: released, the error propagates, a redelivery runs it', async () => {
      let fail = true;
      const { bot, seen } = setup({
        handler: () => {
          if (fail) {
            fail = false;
            throw new Error('handler failed');
          }
        },
      });
      const u = messageUpdate(++nextUpdate);
      await assert.rejects(bot.handleUpdate(u), /handler failed/);
      await bot.handleUpdate(structuredClone(u)); // redelivery: runs again, succeeds
      await bot.handleUpdate(structuredClone(u)); // now done: skipped
      assert.deepEqual(seen, [u.update_id, u.update_id]);
    });

    test('keepMs: the done mark expires', async () => {
      const { bot, seen } = setup({ options: { keepMs: 150 } });
      const u = messageUpdate(++nextUpdate);
      await bot.handleUpdate(u);
      await bot.handleUpdate(structuredClone(u));
      await sleep(300);
      await bot.handleUpdate(structuredClone(u));
      assert.deepEqual(seen, [u.update_id, u.update_id]);
    });

    test('a custom key', async () => {
      const { bot, seen } = setup({
        options: { key: (ctx) => `tg:${ctx.me?.id ?? ctx.botInfo?.id}:msg:${ctx.message?.text}` },
      });
      const text = `hello ${++nextUpdate}`;
      await bot.handleUpdate(messageUpdate(++nextUpdate, text));
      await bot.handleUpdate(messageUpdate(++nextUpdate, text)); // another update, same key
      assert.equal(seen.length, 1);
    });

    test('replies go to the loopback fake API, once per update', async () => {
      const before = api.calls.length;
      const { bot, seen } = setup({ handler: (ctx) => ctx.reply('once') });
      const u = messageUpdate(++nextUpdate);
      await Promise.all([bot.handleUpdate(u), bot.handleUpdate(structuredClone(u))]);
      await bot.handleUpdate(structuredClone(u));
      assert.equal(seen.length, 1);
      const calls = api.calls.slice(before);
      assert.equal(calls.length, 1, JSON.stringify(calls));
      assert.match(calls[0].url, /\/sendMessage$/);
      assert.match(calls[0].body, /once/);
    });

    test('control: without the middleware the handler does run twice', async () => {
      const seen = [];
      const bot = makeBot({
        client: null,
        apiRoot: api.apiRoot,
        middleware: (ctx, next) => next(),
        handler: async (ctx) => {
          seen.push(ctx.update.update_id);
          await sleep(50);
        },
      });
      const u = messageUpdate(++nextUpdate);
      await Promise.all([bot.handleUpdate(u), bot.handleUpdate(structuredClone(u))]);
      await bot.handleUpdate(structuredClone(u));
      assert.equal(seen.length, 3);
    });

    test('nothing left loopback; only those replies reached the (fake) Bot API', () => {
      assert.deepEqual(offLoopback, []);
      assert.ok(api.calls.every((c) => /\/sendMessage$/.test(c.url)), JSON.stringify(api.calls));
    });
  });
}
