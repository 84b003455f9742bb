// Leader election over redlockd: one leader at a time, standbys in line.
//
// A campaign acquires the resource with renew and fence and waits in the
// daemon's FIFO (standbys on one daemon are served in arrival order; one on
// another daemon wakes on the release's pub/sub announcement, or after the
// TTL when the leader's daemon died). The daemon's wait is bounded
// (wait_ms <= 300000), so the campaign waits in rounds and goes on after
// each `busy`; after an error that may pass (no quorum, connection lost,
// daemon shutting down) it backs off and tries again.

import {
  BusyError,
  ConnectionLostError,
  LimitError,
  LostError,
  NoQuorumError,
  NotHeldError,
  RequestTimeoutError,
  ShuttingDownError,
} from './errors.js';
import { optionsOf } from './options.js';

export const DEFAULT_LEADER_TTL_MS = 5000;
const CAMPAIGN_OPTIONS = ['ttlMs', 'roundMs', 'signal', 'timeoutMs'];
export const MAX_ROUND_MS = 300_000;

const RETRYABLE = [NoQuorumError, ConnectionLostError, RequestTimeoutError, ShuttingDownError, LimitError];

function backoffMs(n) {
  return Math.min(2000, 50 * 2 ** Math.min(n, 6)) * (0.5 + Math.random() / 2);
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * One term of leadership. `signal` aborts (reason: a LostError) when the
 * leadership is lost: the daemon's `lost` event (sent before the lock's
 * validity ends) or the connection closing. `fence` (bigint) grows with
 * every term; `resign()` releases at once, and the next standby leads.
 */
export class Leadership {
  constructor(client, lock) {
    this.client = client;
    this.lock = lock;
    this.resource = lock.resource;
    this.fence = lock.fence;
    this.signal = lock.signal;
  }

  get lost() {
    return this.lock.lost;
  }

  /** Give leadership up (idempotent; a lost leadership has nothing to give). */
  async resign() {
    if (this.lock.lost || this.resigned) return;
    this.resigned = true;
    try {
      await this.client.release(this.lock);
    } catch (e) {
      if (!(e instanceof NotHeldError)) throw e;
    }
  }
}

/**
 * Wait until this process leads `resource`; resolves with a Leadership.
 * Options: ttlMs (default 5000: how soon a leader whose daemon died is
 * replaced), roundMs (one wait in the daemon, <= 300000), signal (abort
 * the campaign), timeoutMs (reject with BusyError after this long).
 */
export async function campaign(client, resource, options) {
  const { ttlMs = DEFAULT_LEADER_TTL_MS, roundMs = MAX_ROUND_MS, signal, timeoutMs } = optionsOf(
    options,
    'campaign',
    '{ ttlMs: 5000 }',
    CAMPAIGN_OPTIONS,
  );
  if (!(roundMs > 0 && roundMs <= MAX_ROUND_MS)) {
    throw new RangeError(`roundMs must be in 1..${MAX_ROUND_MS}`);
  }
  const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
  let failures = 0;
  for (;;) {
    if (signal?.aborted) throw signal.reason;
    const left = deadline - Date.now();
    if (left <= 0) throw new BusyError(`no leadership of '${resource}' within ${timeoutMs} ms`);
    const waitMs = Math.max(1, Math.min(roundMs, Math.floor(Math.min(left, MAX_ROUND_MS))));
    try {
      const lock = await client.acquire(resource, { ttlMs, waitMs, renew: true, fence: true, signal });
      return new Leadership(client, lock);
    } catch (e) {
      if (e instanceof BusyError) {
        failures = 0; // a round ran out: wait another
        continue;
      }
      if (!RETRYABLE.some((cls) => e instanceof cls)) throw e;
      failures++;
      await sleep(backoffMs(failures), signal);
    }
  }
}

/**
 * Wait for leadership, run `fn(signal, leadership)`, resign in finally.
 * `signal` aborts when leadership is lost; then this rejects with the
 * LostError at once (fn's own promise is left to settle on its own), else
 * it resolves with fn's result.
 */
export async function runAsLeader(client, resource, options, fn) {
  if (typeof options === 'function') {
    fn = options;
    options = {};
  }
  if (typeof fn !== 'function') throw new TypeError('runAsLeader(resource, [options], fn): fn must be a function');
  const term = await campaign(client, resource, options);
  try {
    return await untilLost(term.lock, () => fn(term.signal, term));
  } finally {
    await term.resign().catch(() => {});
  }
}

/**
 * Run `fn()` and settle with it, or reject with the lock's LostError the
 * moment the lock is lost (fn's promise is then left to settle on its own:
 * it was told through the lock's signal).
 */
export function untilLost(lock, fn) {
  const signal = lock.signal;
  if (signal.aborted) return Promise.reject(signal.reason);
  let onAbort;
  const lost = new Promise((_, reject) => {
    onAbort = () => reject(signal.reason ?? new LostError(`lock on '${lock.resource}' lost`, lock));
    signal.addEventListener('abort', onAbort, { once: true });
  });
  const work = Promise.resolve().then(fn);
  work.catch(() => {}); // it may reject after we gave up on it
  return Promise.race([work, lost]).finally(() => signal.removeEventListener('abort', onAbort));
}
