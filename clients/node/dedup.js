// Update de-duplication for bot frameworks, framework-agnostic.
//
// The Telegram pattern from proto/README.md: acquire `tg:update:<update_id>`
// with a TTL longer than the handler, run it, `complete`. A duplicate
// delivery gets `busy` while the first is running and `done` afterwards and
// is skipped; if the handler throws the lock is released so that a
// redelivery runs it again; if the worker dies, the lock expires (or goes
// with its connection) and a retry acquires it.

import { BusyError, DoneError } from './lib/errors.js';
import { optionsOf } from './lib/options.js';
import { untilLost } from './lib/leader.js';

const DEDUP_OPTIONS = ['ttlMs', 'keepMs', 'key', 'renew', 'onDuplicate', 'onCompleteError', 'property'];

/** The default key: `tg:update:<update_id>`, undefined without an update id. */
export function defaultKey(ctx) {
  const id = ctx?.update?.update_id;
  return id === undefined || id === null ? undefined : `tg:update:${id}`;
}

/**
 * Build a `(ctx, next) => Promise<void>` middleware.
 * @param {import('./index.js').RedlockClient} client
 * @param {object} [options]
 * @param {number} [options.ttlMs] lock TTL, longer than the handler (default 60000)
 * @param {number} [options.keepMs] how long the done mark lives (default: the daemon's, 24 h)
 * @param {(ctx) => string|undefined|Promise<string|undefined>} [options.key] resource per update; undefined: no dedup, just next()
 * @param {boolean} [options.renew] let the daemon renew the lock while the handler runs (default false)
 * @param {(ctx, err) => unknown} [options.onDuplicate] called for a skipped duplicate (err: BusyError or DoneError)
 * @param {(err, ctx) => unknown} [options.onCompleteError] called when `complete` fails after the handler succeeded; default: rethrow
 * @param {string} [options.property] the ctx property that holds the lock while the chain runs (default 'lock')
 *
 * The handler finds the Lock in `ctx.lock` (`fence`, `signal`). If the lock
 * is lost while the chain runs (`renew: true` and the daemon could not keep
 * it, or the connection closed), `ctx.lock.signal` aborts and the middleware
 * rejects at once with the LostError; nothing is marked done, so a
 * redelivery runs the update again.
 */
export function createDedup(client, options = {}) {
  if (!client || typeof client.acquire !== 'function') {
    throw new TypeError('dedup: the first argument must be a RedlockClient');
  }
  const {
    ttlMs = 60_000,
    keepMs,
    key = defaultKey,
    renew = false,
    onDuplicate,
    onCompleteError,
    property = 'lock',
  } = optionsOf(options, 'dedup', '{ ttlMs: 60000 }', DEDUP_OPTIONS);
  if (typeof key !== 'function') throw new TypeError('dedup: options.key must be a function');

  return async function redlockDedup(ctx, next) {
    const resource = await key(ctx);
    if (resource === undefined || resource === null || resource === '') {
      return next();
    }
    let lock;
    try {
      lock = await client.acquire(String(resource), { ttlMs, renew });
    } catch (err) {
      if (err instanceof BusyError || err instanceof DoneError) {
        if (onDuplicate) await onDuplicate(ctx, err);
        return undefined; // a duplicate: skip without calling next
      }
      throw err;
    }
    ctx[property] = lock;
    try {
      await untilLost(lock, next);
    } catch (err) {
      // Failed: let a redelivery handle it again.
      try {
        if (!lock.lost) await client.release(lock);
      } catch {
        /* expired or lost meanwhile: nothing held any more */
      }
      throw err;
    }
    try {
      await client.complete(lock, keepMs === undefined ? {} : { keepMs });
    } catch (err) {
      if (onCompleteError) await onCompleteError(err, ctx);
      else throw err;
    }
    return undefined;
  };
}
