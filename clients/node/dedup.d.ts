import type { BusyError, DoneError, RedlockClient } from './index.js';

/** The least a bot framework context has to carry for the default key. */
export interface DedupContext {
  update?: { update_id: number };
}

export interface DedupOptions<C = DedupContext> {
  /** Lock TTL, longer than the handler. Default 60000. */
  ttlMs?: number;
  /** How long the done mark lives. Default: the daemon's (24 h). */
  keepMs?: number;
  /** The resource for an update; undefined/null/'' runs next() without dedup. Default `tg:update:<update_id>`. */
  key?: (ctx: C) => string | undefined | null | Promise<string | undefined | null>;
  /** Let the daemon renew the lock while the handler runs. Default false. */
  renew?: boolean;
  /** Called for a skipped duplicate. */
  onDuplicate?: (ctx: C, error: BusyError | DoneError) => unknown;
  /** Called when `complete` fails after the handler succeeded. Default: rethrow. */
  onCompleteError?: (error: Error, ctx: C) => unknown;
  /** The ctx property that holds the Lock while the chain runs. Default 'lock'. */
  property?: string;
}

export type DedupMiddleware<C = DedupContext> = (ctx: C, next: () => Promise<void>) => Promise<void>;

/** `tg:update:<update_id>`, or undefined without an update id. */
export declare function defaultKey(ctx: DedupContext): string | undefined;

/**
 * Framework-agnostic `(ctx, next)` middleware: acquire the key, skip
 * duplicates (busy/done) without calling next, run next, complete on
 * success, release and rethrow on error.
 */
export declare function createDedup<C = DedupContext>(
  client: RedlockClient,
  options?: DedupOptions<C>,
): DedupMiddleware<C>;
