// Compiled (never run) by test/types.test.js: the declarations must describe
// real usage, including grammY and Telegraf bots.
import {
  BusyError,
  DoneError,
  type Health,
  Lock,
  LostError,
  NotHeldError,
  RedlockClient,
  RedlockError,
  createDedup,
  errorFromCode,
} from 'redlockd-client';
import { type LockFlavor, dedupMiddleware as grammyDedup, sequentialize as grammySeq } from 'redlockd-client/grammy';
import { dedupMiddleware as telegrafDedup, sequentialize as telegrafSeq } from 'redlockd-client/telegraf';
import { Bot, type Context } from 'grammy';
import { Telegraf } from 'telegraf';

async function main(): Promise<void> {
  const client = new RedlockClient({ path: '/run/redlockd.sock', timeoutMs: 5000 });
  const lock: Lock = await client.acquire('orders:42', { ttlMs: 30_000, waitMs: 1000, fence: true, renew: true });
  const token: string = lock.token;
  const fence: bigint | undefined = lock.fence;
  const validity: number = lock.validityMs;
  lock.signal.addEventListener('abort', () => {
    const reason: unknown = lock.signal.reason;
    if (reason instanceof LostError) console.log(reason.code, reason.lock?.resource);
  });
  await client.extend(lock, 60_000);
  await lock.extend();
  await client.complete(lock, { keepMs: 3_600_000 });
  await client.release({ token, resource: 'orders:42' }).catch((e: unknown) => {
    if (e instanceof NotHeldError) {
      const c: 'not_held' = e.code;
      void c;
    }
  });
  const rtt: number = await client.ping();
  const h: Health = await client.health();
  const up: boolean = h.nodes.every((n) => n.up);
  const n: number = await client.using('job', { ttlMs: 1000 }, async (signal, l) => {
    signal.throwIfAborted();
    return l.validityMs;
  });
  const s: string = await client.using('job', async () => 'x');
  client.on('lost', (l: Lock, e: LostError) => console.log(l.resource, e.message));
  const err: RedlockError = errorFromCode('busy', 'm');
  if (err instanceof BusyError || err instanceof DoneError) console.log(err.code);
  {
    await using held = await client.acquire('scoped');
    void held;
  }
  const term = await client.campaign('tg:poller', { ttlMs: 5000, roundMs: 60_000 });
  const tf: bigint = term.fence;
  term.signal.throwIfAborted();
  await term.resign();
  const led: number = await client.runAsLeader('tg:poller', async (signal, t) => {
    signal.throwIfAborted();
    return Number(t.fence);
  });
  await client.close();
  void [fence, validity, rtt, up, n, s, tf, led];

  // grammY
  const bot = new Bot<Context>('1:x', { botInfo: undefined });
  bot.use(grammyDedup(client, { ttlMs: 60_000, keepMs: 86_400_000 }));
  bot.use(grammyDedup(client, { key: (ctx: Context) => `tg:${ctx.me.id}:${ctx.update.update_id}` }));
  bot.use(createDedup(client));
  bot.use(grammySeq(client, { key: (ctx: Context) => ctx.chat && `chat:${ctx.chat.id}`, waitMs: 5000 }));
  const flavored = new Bot<Context & LockFlavor>('1:x');
  flavored.use(grammySeq(client));
  flavored.on('message', (ctx) => {
    const f: bigint | undefined = ctx.lock.fence;
    ctx.lock.signal.throwIfAborted();
    void f;
  });

  // Telegraf
  const tg = new Telegraf('1:x');
  tg.use(telegrafDedup(client, { ttlMs: 60_000, key: (ctx) => 'tg:update:' + ctx.update.update_id }));
  tg.use(createDedup(client, { onDuplicate: (_ctx, e) => console.log(e.code) }));
  tg.use(telegrafSeq(client));
}

void main;
