import type { Lock, RedlockClient } from './index.js';
import type { DedupContext, DedupMiddleware, DedupOptions } from './dedup.js';

export type { DedupContext, DedupMiddleware, DedupOptions } from './dedup.js';
export { defaultKey } from './dedup.js';
export type { SequentializeContext, SequentializeMiddleware, SequentializeOptions } from './sequentialize.js';
export { chatKey, sequentialize } from './sequentialize.js';

/**
 * What the middleware adds to a context while the chain runs (grammY
 * flavor style): `Bot<Context & LockFlavor>`, then `ctx.lock.fence`,
 * `ctx.lock.signal` in handlers.
 */
export type LockFlavor = { lock: Lock };

/**
 * Middleware for grammY and Telegraf: acquire `tg:update:<update_id>` (or
 * `options.key`), skip duplicates (busy/done) without calling next, run next
 * with the Lock in ctx.lock, complete on success, release and rethrow on
 * error, reject with LostError if the lock is lost.
 */
export declare function dedupMiddleware<C = DedupContext>(
  client: RedlockClient,
  options?: DedupOptions<C>,
): DedupMiddleware<C>;

export default dedupMiddleware;
