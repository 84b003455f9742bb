"""redlockd: Python clients for the redlockd distributed-lock daemon.

Standard library only.  :class:`RedlockClient` is the synchronous client
(thread-safe, many requests in flight on one connection);
:class:`AsyncRedlockClient` is the asyncio one.  See README.md.
"""

from .aio import AsyncLock, AsyncRedlockClient
from .client import Lock, RedlockClient
from .errors import (ERRORS, BadRequestError, BusyError, ConnectionLostError,
                     DoneError, InternalError, LimitError, LockLostError,
                     NoQuorumError,
                     NotHeldError, ProtocolError, RedlockError,
                     RequestTimeoutError, ShuttingDownError, TooLargeError,
                     error_from_response)

__version__ = "0.1.0"

__all__ = [
    "RedlockClient",
    "AsyncRedlockClient",
    "Lock",
    "AsyncLock",
    "RedlockError",
    "LockLostError",
    "BadRequestError",
    "NotHeldError",
    "BusyError",
    "DoneError",
    "TooLargeError",
    "LimitError",
    "NoQuorumError",
    "ShuttingDownError",
    "InternalError",
    "ConnectionLostError",
    "RequestTimeoutError",
    "ProtocolError",
    "ERRORS",
    "error_from_response",
]
