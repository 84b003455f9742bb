// grammY middleware: each update once (dedupMiddleware), one update per chat
// at a time across instances (sequentialize), the lock in ctx.lock.
//
//   import { Bot } from 'grammy';
//   import { RedlockClient } from 'redlockd-client';
//   import { dedupMiddleware, sequentialize } from 'redlockd-client/grammy';
//   const client = new RedlockClient();
//   bot.use(sequentialize(client), dedupMiddleware(client, { ttlMs: 60_000 }));
//
// The same implementation as redlockd-client/telegraf (./middleware.js).
export * from './middleware.js';
export { default } from './middleware.js';
