import type { RedlockClient } from './index.js';

/** The least a bot framework context has to carry for the default key. */
export interface SequentializeContext {
  chat?: { id: number };
  me?: { id: number };
  botInfo?: { id: number };
}

export interface SequentializeOptions<C = SequentializeContext> {
  /** Resource per update; undefined/null/'' runs next() unserialised. Default `tg:chat:<bot id>:<chat id>`. */
  key?: (ctx: C) => string | undefined | null | Promise<string | undefined | null>;
  /** Lock TTL, renewed while the chain runs. Default 30000. */
  ttlMs?: number;
  /** How long an update waits for the ones before it, 0..300000. Default 60000; then BusyError. */
  waitMs?: number;
  /** Also take a fencing token (ctx.lock.fence). Default true. */
  fence?: boolean;
  /** The ctx property that holds the Lock. Default 'lock'. */
  property?: string;
}

export type SequentializeMiddleware<C = SequentializeContext> = (ctx: C, next: () => Promise<void>) => Promise<void>;

/** `tg:chat:<bot id>:<chat id>`, or undefined without a chat. */
export declare function chatKey(ctx: SequentializeContext): string | undefined;

/**
 * grammY's `sequentialize` across processes: updates with the same key run
 * one at a time across every instance (FIFO within one daemon), others in
 * parallel; the Lock is in ctx.lock while the chain runs.
 */
export declare function sequentialize<C = SequentializeContext>(
  client: RedlockClient,
  options?: SequentializeOptions<C>,
): SequentializeMiddleware<C>;

export default sequentialize;
