// Per-chat serialisation across bot instances: grammY's `sequentialize`
// (which orders the updates of one chat inside one process) over redlockd,
// so that it holds across every process and host of the bot.
//
// Each update with a key acquires `tg:chat:<bot id>:<chat id>` (by default)
// with renew and a bounded wait, runs the rest of the chain with the Lock in
// ctx.lock, and releases. Updates of one chat wait for each other, in
// arrival order within one daemon; other chats run in parallel.

import { optionsOf } from './lib/options.js';
import { untilLost } from './lib/leader.js';

const SEQUENTIALIZE_OPTIONS = ['key', 'ttlMs', 'waitMs', 'fence', 'property'];

/** The default key: `tg:chat:<bot id>:<chat id>`, undefined without a chat. */
export function chatKey(ctx) {
  const chat = ctx?.chat?.id;
  if (chat === undefined || chat === null) return undefined;
  const bot = ctx.me?.id ?? ctx.botInfo?.id ?? 'bot';
  return `tg:chat:${bot}:${chat}`;
}

/**
 * Build a `(ctx, next) => Promise<void>` middleware for grammY or Telegraf.
 * @param {import('./index.js').RedlockClient} client
 * @param {object} [options]
 * @param {(ctx) => string|undefined|Promise<string|undefined>} [options.key] resource per update (default chatKey); undefined: not serialised
 * @param {number} [options.ttlMs] lock TTL, renewed by the daemon while the chain runs (default 30000): a dead instance frees the chat within it
 * @param {number} [options.waitMs] how long an update waits for the ones before it (default 60000, at most 300000); then BusyError
 * @param {boolean} [options.fence] also take a fencing token, ctx.lock.fence (default true)
 * @param {string} [options.property] the ctx property that holds the lock (default 'lock')
 *
 * If the lock is lost while the chain runs, ctx.lock.signal aborts and the
 * middleware rejects at once with the LostError.
 */
export function sequentialize(client, options = {}) {
  if (!client || typeof client.acquire !== 'function') {
    throw new TypeError('sequentialize: the first argument must be a RedlockClient');
  }
  const {
    key = chatKey,
    ttlMs = 30_000,
    waitMs = 60_000,
    fence = true,
    property = 'lock',
  } = optionsOf(options, 'sequentialize', '{ waitMs: 60000 }', SEQUENTIALIZE_OPTIONS);
  if (typeof key !== 'function') throw new TypeError('sequentialize: options.key must be a function');
  if (!(Number.isInteger(waitMs) && waitMs >= 0 && waitMs <= 300_000)) {
    throw new RangeError("sequentialize: options.waitMs must be an integer in 0..300000 (the daemon's largest wait)");
  }

  return async function redlockSequentialize(ctx, next) {
    const resource = await key(ctx);
    if (resource === undefined || resource === null || resource === '') return next();
    const lock = await client.acquire(String(resource), { ttlMs, waitMs, renew: true, fence });
    ctx[property] = lock;
    try {
      await untilLost(lock, next);
    } finally {
      if (!lock.lost) {
        await client.release(lock).catch(() => {
          /* lost or expired meanwhile: nothing held any more */
        });
      }
    }
  };
}

export default sequentialize;
