// The grammY and Telegraf middleware: one implementation for both (they
// share the `(ctx, next)` shape). `redlockd-client/grammy` and
// `redlockd-client/telegraf` re-export this module.
//
//   bot.use(sequentialize(client));                 // one update per chat at a time
//   bot.use(dedupMiddleware(client, { ttlMs: 60_000 })); // each update once
//   bot.on('message', (ctx) => save(ctx.lock.fence, { signal: ctx.lock.signal }));
//
// Neither framework is a dependency.

import { createDedup, defaultKey } from './dedup.js';
import { chatKey, sequentialize } from './sequentialize.js';

export { chatKey, defaultKey, sequentialize };

/** Acquire `tg:update:<update_id>`, skip busy/done, run the rest of the
 * chain with the lock in ctx.lock, complete on success, release and rethrow
 * on error, reject with LostError if the lock is lost. */
export function dedupMiddleware(client, options = {}) {
  return createDedup(client, options);
}

export default dedupMiddleware;
