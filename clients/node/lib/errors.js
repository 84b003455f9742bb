// Error classes of the redlockd Node client: one per daemon error code, plus
// the client-side ones (connection lost, lock lost, timeout, closed client).

/** Base class of every error this package throws. `code` is the daemon's
 * error code (`busy`, `done`, ...) or a client-side one. */
export class RedlockError extends Error {
  constructor(message, code = 'internal', options) {
    super(message, options);
    this.name = 'RedlockError';
    this.code = code;
  }
}

function codeClass(name, code) {
  const cls = class extends RedlockError {
    constructor(message = code, options) {
      super(message, code, options);
      this.name = name;
    }
  };
  Object.defineProperty(cls, 'name', { value: name });
  cls.code = code;
  return cls;
}

/** The resource is held by another owner (after wait_ms, if any). */
export const BusyError = codeClass('BusyError', 'busy');
/** The resource was completed and its done mark has not expired. */
export const DoneError = codeClass('DoneError', 'done');
/** Unknown token, or the lock already expired or was lost. */
export const NotHeldError = codeClass('NotHeldError', 'not_held');
/** Fewer than a quorum of nodes answered in time. */
export const NoQuorumError = codeClass('NoQuorumError', 'no_quorum');
/** Malformed request or bad field; the message names the field. */
export const BadRequestError = codeClass('BadRequestError', 'bad_request');
/** Request line over the daemon's limit. */
export const TooLargeError = codeClass('TooLargeError', 'too_large');
/** Too many connections, locks or waiters. */
export const LimitError = codeClass('LimitError', 'limit');
/** The daemon is stopping. */
export const ShuttingDownError = codeClass('ShuttingDownError', 'shutting_down');
/** A bug in the daemon (it logged it). */
export const InternalError = codeClass('InternalError', 'internal');

/** The connection to the daemon dropped (or could not be made) while a
 * request was in flight. The request may or may not have been carried out;
 * locks taken on that connection are released by the daemon. */
export const ConnectionLostError = codeClass('ConnectionLostError', 'connection_lost');
/** No answer within the request timeout. */
export const RequestTimeoutError = codeClass('RequestTimeoutError', 'timeout');
/** The client was closed with close(). */
export const ClientClosedError = codeClass('ClientClosedError', 'client_closed');

/** A held lock was lost: the daemon sent a `lost` event (renewal could not
 * keep a quorum), or the connection it was tied to closed. Used as the
 * `reason` of `lock.signal`. */
export class LostError extends RedlockError {
  constructor(message, lock, options) {
    super(message, 'lost', options);
    this.name = 'LostError';
    this.lock = lock;
  }
}
LostError.code = 'lost';

const BY_CODE = new Map(
  [
    BusyError,
    DoneError,
    NotHeldError,
    NoQuorumError,
    BadRequestError,
    TooLargeError,
    LimitError,
    ShuttingDownError,
    InternalError,
  ].map((c) => [c.code, c]),
);

/** The Error for a daemon error object `{code, message}`. Unknown codes give
 * a plain RedlockError carrying that code. */
export function errorFromCode(code, message) {
  const cls = BY_CODE.get(code);
  const msg = message || String(code);
  return cls ? new cls(msg) : new RedlockError(msg, String(code));
}
