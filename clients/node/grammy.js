// grammY middleware: skip duplicate deliveries of the same update.
//
//   import { Bot } from 'grammy';
//   import { RedlockClient } from 'redlockd-client';
//   import { dedupMiddleware } from 'redlockd-client/grammy';
//   bot.use(dedupMiddleware(new RedlockClient(), { ttlMs: 60_000 }));
//
// grammY is not a dependency: the middleware is a plain (ctx, next) function.

import { createDedup, defaultKey } from './dedup.js';

export { defaultKey };

/** grammY middleware: acquire `tg:update:<update_id>`, skip busy/done, run
 * the rest of the chain, complete on success, release and rethrow on error. */
export function dedupMiddleware(client, options = {}) {
  return createDedup(client, options);
}

export default dedupMiddleware;
