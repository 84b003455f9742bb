"""Exceptions raised by the redlockd clients.

Every error the daemon can answer has its own class, keyed by the wire
``code`` (see PROTOCOL.md).  All of them subclass :class:`RedlockError`, so
``except RedlockError`` catches everything this package raises on purpose.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
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


class RedlockError(Exception):
    """Base class of every error this package raises.

    ``code`` is the daemon's error code (``None`` for client-side errors),
    ``message`` its human-readable text and ``response`` the decoded
    response object when there was one.
    """

    code: Optional[str] = None

    def __init__(self, message: str = "", code: Optional[str] = None,
                 response: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.response = response

    def __str__(self) -> str:
        if self.code:
            return "%s: %s" % (self.code, self.message)
        return self.message


class BadRequestError(RedlockError, ValueError):
    """``bad_request``: malformed JSON, unknown op or a bad field."""
    code = "bad_request"


class NotHeldError(RedlockError):
    """``not_held``: unknown token, or the lock expired or was lost."""
    code = "not_held"


class BusyError(RedlockError):
    """``busy``: held by another owner (after ``wait_ms``, if any)."""
    code = "busy"


class DoneError(RedlockError):
    """``done``: the resource was completed and its mark has not expired."""
    code = "done"


class TooLargeError(RedlockError):
    """``too_large``: request line over the daemon's limit."""
    code = "too_large"


class LimitError(RedlockError):
    """``limit``: too many connections, locks or waiters."""
    code = "limit"


class NoQuorumError(RedlockError):
    """``no_quorum``: fewer than a quorum of nodes answered in time."""
    code = "no_quorum"


class ShuttingDownError(RedlockError):
    """``shutting_down``: the daemon is stopping."""
    code = "shutting_down"


class InternalError(RedlockError):
    """``internal``: a bug in the daemon (it logged it)."""
    code = "internal"


class ConnectionLostError(RedlockError, ConnectionError):
    """The connection to the daemon could not be made, or was closed.

    Requests in flight when the connection closes fail with this error.
    Locks taken on that connection are released by the daemon (session
    locks).  ``daemon_error`` is the daemon's last id-less error, when it
    sent one before closing (``too_large`` or an unparseable line).
    """

    def __init__(self, message: str = "connection lost",
                 daemon_error: Optional[RedlockError] = None) -> None:
        super().__init__(message)
        self.daemon_error = daemon_error


class RequestTimeoutError(RedlockError, TimeoutError):
    """No response within the client-side timeout.

    The request may still complete on the daemon; a lock acquired after the
    timeout is released by the client as soon as its late answer arrives.
    """


class ProtocolError(RedlockError):
    """The daemon sent something that is not valid NDJSON."""


class LockLostError(RedlockError):
    """A lock (or a leadership) was lost while work ran under it.

    Raised by the helpers that run work under a lock (``redlockd.leader``,
    ``redlockd.scope``, the framework integrations) when the daemon reported
    the lock lost or its connection closed: asyncio work was cancelled, sync
    work was told through ``lock.lost``.  ``lock`` is the lost lock.
    """

    code = "lost"

    def __init__(self, message: str = "lock lost",
                 lock: Any = None) -> None:
        super().__init__(message)
        self.lock = lock


ERRORS: Dict[str, Type[RedlockError]] = {
    cls.code: cls  # type: ignore[misc]
    for cls in (BadRequestError, NotHeldError, BusyError, DoneError,
                TooLargeError, LimitError, NoQuorumError, ShuttingDownError,
                InternalError)
}


def error_from_response(response: Mapping[str, Any]) -> RedlockError:
    """The exception for a failed response ``{"ok":false,"error":{..}}``.

    An unknown code gives a plain :class:`RedlockError` with that code.
    """
    err = response.get("error") if isinstance(response, Mapping) else None
    if not isinstance(err, Mapping):
        return ProtocolError("malformed error response: %r" % (response,),
                             response=response)
    code = err.get("code")
    message = err.get("message")
    if not isinstance(message, str):
        message = ""
    if not isinstance(code, str):
        return ProtocolError("error response without a code: %r"
                             % (response,), response=response)
    cls = ERRORS.get(code)
    if cls is None:
        return RedlockError(message, code=code, response=response)
    return cls(message, response=response)
