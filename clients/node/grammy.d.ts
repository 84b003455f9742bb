import type { RedlockClient } from './index.js';
import type { DedupContext, DedupMiddleware, DedupOptions } from './dedup.js';

export type { DedupContext, DedupMiddleware, DedupOptions } from './dedup.js';
export { defaultKey } from './dedup.js';

/**
 * Middleware for grammY: acquire `tg:update:<update_id>` (or `options.key`),
 * skip duplicates (busy/done) without calling next, run next, complete on
 * success, release and rethrow on error. Use with `bot.use(...)`.
 */
export declare function dedupMiddleware<C = DedupContext>(
  client: RedlockClient,
  options?: DedupOptions<C>,
): DedupMiddleware<C>;

export default dedupMiddleware;
