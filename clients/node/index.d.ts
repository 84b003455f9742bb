// Type declarations for redlockd-client (ESM; Node 20.19+, 22.12+ or 23+).

import type { EventEmitter } from 'node:events';

export interface RedlockClientOptions {
  /** Unix socket of the daemon. Default: env REDLOCKD_SOCKET, else `./redlockd.sock`. */
  path?: string;
  /** Per-request timeout in ms (acquire adds its `waitMs`), over 0; Infinity: none. Default 10000. */
  timeoutMs?: number;
  /** Connect timeout in ms. Default 5000. */
  connectTimeoutMs?: number;
  /**
   * The daemon's `--max-line-bytes` (default 65536). A longer request
   * (without its newline, as the daemon counts) is
   * refused locally with TooLargeError instead of letting the daemon close
   * the connection (and release its session locks).
   */
  maxLineBytes?: number;
}

export interface CallOptions {
  /** Give up after this many ms (RequestTimeoutError); over 0, Infinity: never. */
  timeoutMs?: number;
  /** Abort waiting for the answer; rejects with `signal.reason`. */
  signal?: AbortSignal;
}

export interface AcquireOptions extends CallOptions {
  /** Lock time to live, 10..86400000 ms. Daemon default 30000. */
  ttlMs?: number;
  /** Keep trying while busy, 0..300000 ms. Default 0. */
  waitMs?: number;
  /** Let the daemon extend the lock every ttl/3 until released; `lock.signal` aborts if it cannot. */
  renew?: boolean;
  /** Stop renewing after this many ms (0: no limit). */
  renewMaxMs?: number;
  /** Also return a fencing token (`lock.fence`). */
  fence?: boolean;
  /**
   * Take one of this many permits (2..1024) of a semaphore instead of the
   * lock: at most that many holders at once. `lock.permit` says which.
   */
  permits?: number;
  /**
   * An explicit timeout for this call, the whole wait included. Without it
   * the client's `timeoutMs` plus `waitMs` applies. A grant that arrives
   * after a timeout or abort is released by the client.
   */
  timeoutMs?: number;
}

export interface CompleteOptions extends CallOptions {
  /** How long the done mark lives, 1..2592000000 ms. Daemon default 86400000. */
  keepMs?: number;
}

/** What release/extend/complete need: a Lock, or its token and resource. */
export interface LockRef {
  token: string;
  resource: string;
  /** A semaphore's permit, as acquire answered it. */
  permit?: number;
}

export declare class Lock implements LockRef {
  /** 32 lowercase hex characters, unique per acquisition. */
  readonly token: string;
  readonly resource: string;
  /** Validity left when the daemon answered acquire (or the last extend), in ms. */
  validityMs: number;
  /** `Date.now()` by which the lock expires unless extended or renewed. */
  expiresAt: number;
  /** Fencing token, strictly increasing; only with `fence: true`. */
  readonly fence: bigint | undefined;
  /** Which permit of a semaphore; only with `permits`. */
  readonly permit?: number;
  /** Whether the daemon renews it. */
  readonly renew: boolean;
  /** The ttl it was taken with (daemon default 30000), or last extended to: what `extend()` without one sends. */
  ttlMs: number;
  /**
   * Aborts, with a LostError as its reason, when the daemon sends a `lost`
   * event for this lock or the connection it was taken on closes.
   */
  readonly signal: AbortSignal;
  /** Same as `signal.aborted`. */
  readonly lost: boolean;
  release(): Promise<void>;
  extend(ttlMs?: number): Promise<Lock>;
  complete(options?: CompleteOptions): Promise<void>;
  toJSON(): { token: string; resource: string; validityMs: number; fence?: string };
  [Symbol.asyncDispose](): Promise<void>;
}

export interface NodeHealth {
  addr: string;
  up: boolean;
  state?: string;
  last_error?: string | null;
  rtt_ms?: number;
  quarantined?: boolean;
  /** rediss:// nodes: how the certificate is checked. */
  tls?: 'verified' | 'insecure';
  /** Only on a node that may evict lock keys: its maxmemory-policy. */
  eviction?: string;
  /** Only while the node refuses lock commands (since its last answered acquire): the last error. */
  refusing?: string;
  [key: string]: unknown;
}

export interface Health {
  /** false when fewer than `quorum` nodes are usable; `error` says so. */
  ok: boolean;
  quorum: number;
  nodes: NodeHealth[];
  error?: { code: string; message: string };
  [key: string]: unknown;
}

/** One lock of this daemon's listing (`locks()`): never its token. */
export interface LockEntry {
  resource: string;
  ttl_ms: number;
  validity_ms: number;
  renew: boolean;
  fence: bigint | null;
  held_ms: number;
  /** Wall clock of the acquisition, ms since the epoch. */
  since_ms: number;
  /** 'http', or the NDJSON connection (pid/uid/gid by SO_PEERCRED). */
  owner: 'http' | { conn: number; pid?: number; uid?: number; gid?: number };
  /** Acquires waiting for this resource in this daemon. */
  waiters: number;
  [key: string]: unknown;
}

export interface LocksPage {
  locks: LockEntry[];
  count: number;
  total: number;
  /** Present when there may be more: pass it as `cursor`. */
  next?: string;
  [key: string]: unknown;
}

export interface LocksOptions extends CallOptions {
  prefix?: string;
  /** 1..1000, default 100. */
  limit?: number;
  cursor?: string;
}

export interface Inspection {
  resource: string;
  state: 'free' | 'held' | 'done';
  /** Nodes that said `state` (more than n - quorum). */
  agree: number;
  answered: number;
  nodes: number;
  /** held, done: the smallest remaining PTTL among the agreeing nodes. */
  pttl_ms?: number;
  /** Whether this daemon holds it. */
  mine: boolean;
  waiters: number;
  /** When asked: every next fenced acquisition answers more than it. */
  fence?: bigint;
  [key: string]: unknown;
}

export interface RedlockClientEvents {
  connect: [];
  disconnect: [reason: Error];
  /** A Lock this client handed out was lost. */
  lost: [lock: Lock, error: LostError];
  /**
   * Every unsolicited message from the daemon (`{"event": ..}`), also a
   * `lost` event for a lock taken with `request()`.
   */
  event: [message: Record<string, unknown>];
}

export interface CampaignOptions {
  /** The leadership lock's TTL (renewed every ttl/3): how soon a leader whose daemon died is replaced. Default 5000. */
  ttlMs?: number;
  /** One wait in the daemon, 1..300000 ms. Default 300000. */
  roundMs?: number;
  /** Give up with BusyError after this many ms. Default: wait for ever. */
  timeoutMs?: number;
  /** Abort the campaign (rejects with `signal.reason`). */
  signal?: AbortSignal;
}

/** One term of leadership. */
export declare class Leadership {
  readonly client: RedlockClient;
  readonly lock: Lock;
  readonly resource: string;
  /** Grows with every term, whichever daemon granted it. */
  readonly fence: bigint;
  /** Aborts (reason: LostError) when leadership is lost. */
  readonly signal: AbortSignal;
  readonly lost: boolean;
  /** Release now: the next standby leads at once. */
  resign(): Promise<void>;
}

export declare function campaign(client: RedlockClient, resource: string, options?: CampaignOptions): Promise<Leadership>;
export declare function runAsLeader<T>(
  client: RedlockClient,
  resource: string,
  options: CampaignOptions,
  fn: (signal: AbortSignal, leadership: Leadership) => Promise<T> | T,
): Promise<T>;
/** Settle with fn(), or reject with the lock's LostError as soon as it is lost. */
export declare function untilLost<T>(lock: Lock, fn: () => Promise<T> | T): Promise<T>;

export declare class RedlockClient extends EventEmitter {
  constructor(options?: RedlockClientOptions);
  readonly path: string;
  timeoutMs: number;
  connectTimeoutMs: number;
  maxLineBytes: number;
  /** True while a connection is open (or opening). */
  readonly connected: boolean;

  acquire(resource: string, options?: AcquireOptions): Promise<Lock>;
  /** Rejects with NotHeldError when the lock had already expired or was lost. */
  release(lock: LockRef, options?: CallOptions): Promise<void>;
  /** Push the expiry out to `ttlMs` from now (default: the lock's TTL). */
  extend(lock: Lock, ttlMs?: number, options?: CallOptions): Promise<Lock>;
  extend(lock: LockRef, ttlMs?: number, options?: CallOptions): Promise<Lock | (LockRef & { validityMs: number })>;
  /** Mark the resource done for `keepMs` and drop the lock: later acquires get DoneError. */
  complete(lock: LockRef, options?: CompleteOptions): Promise<void>;
  /** Resolves with the round trip in ms. */
  ping(options?: CallOptions): Promise<number>;
  /** Resolves also without a quorum (`ok: false`). */
  health(options?: CallOptions): Promise<Health>;
  /** One page of the locks held through this daemon. */
  locks(options?: LocksOptions): Promise<LocksPage>;
  /** Every lock of this daemon, page by page. */
  iterLocks(options?: Omit<LocksOptions, 'cursor'>): AsyncGenerator<LockEntry, void, undefined>;
  /** What the nodes say of a resource; NoQuorumError when they disagree. */
  inspect(resource: string, options?: CallOptions & { fence?: boolean }): Promise<Inspection>;
  /**
   * Acquire (with `renew: true` unless told otherwise), run `fn`, release in
   * finally. `signal` aborts if the lock is lost meanwhile.
   */
  using<T>(resource: string, fn: (signal: AbortSignal, lock: Lock) => Promise<T> | T): Promise<T>;
  using<T>(
    resource: string,
    options: AcquireOptions,
    fn: (signal: AbortSignal, lock: Lock) => Promise<T> | T,
  ): Promise<T>;
  /**
   * Leader election: wait (FIFO in the daemon, in bounded rounds) until this
   * client leads `resource`. `leadership.signal` aborts when it is lost.
   */
  campaign(resource: string, options?: CampaignOptions): Promise<Leadership>;
  /** Campaign, run `fn(signal, leadership)`, resign; rejects with LostError at once on loss. */
  runAsLeader<T>(resource: string, fn: (signal: AbortSignal, leadership: Leadership) => Promise<T> | T): Promise<T>;
  runAsLeader<T>(
    resource: string,
    options: CampaignOptions,
    fn: (signal: AbortSignal, leadership: Leadership) => Promise<T> | T,
  ): Promise<T>;
  /** Low level: send one request object (no `id`), resolve with the answer. */
  request(payload: Record<string, unknown>, options?: CallOptions): Promise<Record<string, unknown>>;
  /**
   * Close the connection (the daemon releases its locks). Requests in flight
   * reject at once with ClientClosedError; an acquire in flight gives no Lock.
   * Final: later calls reject with ClientClosedError.
   */
  close(): Promise<void>;

  on<K extends keyof RedlockClientEvents>(event: K, listener: (...args: RedlockClientEvents[K]) => void): this;
  once<K extends keyof RedlockClientEvents>(event: K, listener: (...args: RedlockClientEvents[K]) => void): this;
  off<K extends keyof RedlockClientEvents>(event: K, listener: (...args: RedlockClientEvents[K]) => void): this;
}

export type DaemonErrorCode =
  | 'busy'
  | 'done'
  | 'not_held'
  | 'bad_request'
  | 'too_large'
  | 'limit'
  | 'no_quorum'
  | 'shutting_down'
  | 'internal';

export type ClientErrorCode = 'connection_lost' | 'timeout' | 'client_closed' | 'lost';

export declare class RedlockError extends Error {
  constructor(message: string, code?: string, options?: ErrorOptions);
  readonly code: DaemonErrorCode | ClientErrorCode | (string & {});
}

declare class CodedError<C extends string> extends RedlockError {
  constructor(message?: string, options?: ErrorOptions);
  readonly code: C;
  static readonly code: string;
}

/** Held by another owner (after `waitMs`, if any). */
export declare class BusyError extends CodedError<'busy'> {}
/** The resource was completed and its done mark has not expired. */
export declare class DoneError extends CodedError<'done'> {}
/** Unknown token, or the lock already expired or was lost. */
export declare class NotHeldError extends CodedError<'not_held'> {}
/** Fewer than a quorum of nodes answered in time. */
export declare class NoQuorumError extends CodedError<'no_quorum'> {}
/** Malformed request or bad field; the message names the field. */
export declare class BadRequestError extends CodedError<'bad_request'> {}
/** Request line over the limit. */
export declare class TooLargeError extends CodedError<'too_large'> {}
/** Too many connections, locks or waiters. */
export declare class LimitError extends CodedError<'limit'> {}
/** The daemon is stopping. */
export declare class ShuttingDownError extends CodedError<'shutting_down'> {}
/** A daemon bug (logged there). */
export declare class InternalError extends CodedError<'internal'> {}
/** The connection dropped (or could not be made) with the request in flight. */
export declare class ConnectionLostError extends CodedError<'connection_lost'> {}
/** No answer within the timeout. */
export declare class RequestTimeoutError extends CodedError<'timeout'> {}
/** The client was closed. */
export declare class ClientClosedError extends CodedError<'client_closed'> {}

/** The reason of `lock.signal` when a lock is lost. */
export declare class LostError extends RedlockError {
  constructor(message: string, lock?: Lock, options?: ErrorOptions);
  readonly code: 'lost';
  readonly lock: Lock | undefined;
  static readonly code: 'lost';
}

/** The Error for a daemon error `{code, message}`; unknown codes give a RedlockError. */
export declare function errorFromCode(code: string, message?: string): RedlockError;

/** Parse one response line; `fence` becomes an exact bigint. */
export declare function parseResponse(line: string): Record<string, unknown> & { fence?: bigint };

export { createDedup } from './dedup.js';
export type { DedupOptions, DedupContext, DedupMiddleware } from './dedup.js';
