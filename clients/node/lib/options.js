// Checks a call's options object, for every public call of the package
// (kept apart so that the client and the leader helpers need not import
// each other for it).

import { BadRequestError } from './errors.js';

/**
 * A call's options: an object, or nothing. A number there (`acquire(r,
 * 5000)`, `complete(lock, 60000)`: node-redlock's positional ttl, and the
 * Python and Go clients' positional ttl and keep) would otherwise be
 * ignored without a word and the defaults used; so would a misspelt key
 * (`{ ttl: 5000 }`), which Python refuses as an unexpected keyword and Go
 * at compile time. `known`: the call's option names. A `timeoutMs` must be
 * over 0: 0 would otherwise mean no timeout at all (Infinity says that).
 */
export function optionsOf(options, call, example, known) {
  if (options === undefined || options === null) return {};
  if (typeof options !== 'object') {
    throw new BadRequestError(
      `${call}: options must be an object such as ${example}, not ${typeof options} ${String(options)}`,
    );
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      throw new BadRequestError(`${call}: unknown option '${key}' (valid: ${known.join(', ')})`);
    }
  }
  const t = options.timeoutMs;
  if (t !== undefined && !(typeof t === 'number' && t > 0)) {
    throw new BadRequestError(
      `${call}: timeoutMs must be a number of ms over 0 (Infinity: no timeout), not ${typeof t} ${String(t)}`,
    );
  }
  return options;
}
