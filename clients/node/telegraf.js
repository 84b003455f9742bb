// Telegraf middleware: each update once (dedupMiddleware), one update per chat
// at a time across instances (sequentialize), the lock in ctx.lock.
//
//   import { Telegraf } from 'telegraf';
//   import { RedlockClient } from 'redlockd-client';
//   import { dedupMiddleware, sequentialize } from 'redlockd-client/telegraf';
//   const client = new RedlockClient();
//   bot.use(sequentialize(client), dedupMiddleware(client, { ttlMs: 60_000 }));
//
// The same implementation as redlockd-client/grammy (./middleware.js).
export * from './middleware.js';
export { default } from './middleware.js';
