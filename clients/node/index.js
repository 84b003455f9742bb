// redlockd Node.js client. Zero runtime dependencies.
export { RedlockClient, Lock, parseResponse } from './lib/client.js';
export {
  RedlockError,
  BusyError,
  DoneError,
  NotHeldError,
  NoQuorumError,
  BadRequestError,
  TooLargeError,
  LimitError,
  ShuttingDownError,
  InternalError,
  ConnectionLostError,
  RequestTimeoutError,
  ClientClosedError,
  LostError,
  errorFromCode,
} from './lib/errors.js';
export { createDedup } from './dedup.js';
export { Leadership, campaign, runAsLeader, untilLost } from './lib/leader.js';
