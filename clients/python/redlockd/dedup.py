"""Process-once core for duplicate deliveries (Telegram updates and alike).

The pattern (PROTOCOL.md, "Idempotency"): acquire ``tg:update:<update_id>``
with a TTL longer than the handler, run the handler, then ``complete`` the
lock, which leaves a *done* mark for ``keep_ms``.  A duplicate delivery gets
``busy`` while the first one runs and ``done`` afterwards: it is skipped.
If the handler raises, the lock is released so a retry can run it; if the
worker dies, the lock expires (or goes with its connection) and a retry
acquires it.

Framework glue (``redlockd.aiogram``, ``examples/ptb_dedup.py``) calls
:func:`process_once` / :func:`aprocess_once`, or :func:`begin` /
:func:`finish` when the handler is not one call.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Awaitable, Callable, Union

from .errors import BusyError, DoneError, RedlockError
from .scope import cancel_on_lost

__all__ = [
    "Skipped",
    "BUSY",
    "DONE",
    "update_key",
    "wants_lock",
    "process_once",
    "aprocess_once",
    "begin",
    "abegin",
    "finish",
    "afinish",
    "DEFAULT_TTL_MS",
    "DEFAULT_KEEP_MS",
]

log = logging.getLogger("redlockd.dedup")

DEFAULT_TTL_MS = 60000          # longer than any handler should run
DEFAULT_KEEP_MS = 86400000      # Telegram redelivers for at most ~24 h


class Skipped:
    """Returned instead of the handler's result for a duplicate.

    ``reason`` is ``"busy"`` (another worker is handling it) or ``"done"``
    (it was handled).  Falsy, so ``if not result`` works when the handler
    itself returns something truthy; otherwise test ``isinstance(result,
    Skipped)`` or ``result is BUSY / DONE``.
    """

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "<Skipped %s>" % self.reason


BUSY = Skipped("busy")
DONE = Skipped("done")


def wants_lock(handler: Callable[..., Any]) -> bool:
    """True when ``handler`` has a required positional parameter: it is
    then called with the lock (``token``, ``fence``, ``lost``)."""
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError):
        return False
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.default is p.empty for p in sig.parameters.values())


def _call(handler: Callable[..., Any], lock: Any) -> Any:
    return handler(lock) if wants_lock(handler) else handler()


def update_key(update_id: Any, prefix: str = "tg:update:") -> str:
    """The resource for one Telegram update: ``tg:update:<update_id>``."""
    return "%s%s" % (prefix, update_id)


# -- sync ------------------------------------------------------------------

def begin(client: Any, key: str, ttl_ms: int = DEFAULT_TTL_MS, *,
          renew: bool = False) -> Any:
    """Acquire ``key`` for processing: the Lock, or BUSY / DONE to skip.

    Other errors (no_quorum, connection lost, ...) propagate.
    """
    try:
        return client.acquire(key, ttl_ms=ttl_ms, renew=renew)
    except BusyError:
        return BUSY
    except DoneError:
        return DONE


def finish(client: Any, lock: Any, ok: bool,
           keep_ms: int = DEFAULT_KEEP_MS) -> None:
    """After the handler: ``complete`` (ok) or ``release`` (failed, so a
    retry can run).  Errors are logged, never raised: the handler's outcome
    is what counts to the caller."""
    try:
        if ok:
            client.complete(lock, keep_ms=keep_ms)
        else:
            client.release(lock)
    except RedlockError as e:
        _log_finish_error(lock, ok, e)


def process_once(client: Any, key: str, handler: Callable[..., Any],
                 ttl_ms: int = DEFAULT_TTL_MS,
                 keep_ms: int = DEFAULT_KEEP_MS, *,
                 renew: bool = False) -> Any:
    """Run ``handler()`` (or ``handler(lock)``, see :func:`wants_lock`) at
    most once (successfully) per ``key``.

    Returns the handler's result, or BUSY / DONE (falsy :class:`Skipped`)
    for a duplicate.  When the handler raises, the lock is released and the
    exception propagates, so a redelivery can try again.  ``renew=True``
    keeps the lock alive for handlers that may outlast ``ttl_ms``; a
    handler that takes the lock can watch ``lock.lost`` (the async version
    cancels it on loss and raises LockLostError).

    With an :class:`~redlockd.AsyncRedlockClient` this returns the
    coroutine of :func:`aprocess_once` (``handler`` may then be async).
    """
    if getattr(client, "is_async", False):
        return aprocess_once(client, key, handler, ttl_ms, keep_ms,
                             renew=renew)
    lock = begin(client, key, ttl_ms, renew=renew)
    if isinstance(lock, Skipped):
        return lock
    try:
        result = _call(handler, lock)
    except BaseException:
        finish(client, lock, False)
        raise
    finish(client, lock, True, keep_ms)
    return result


# -- asyncio ---------------------------------------------------------------

async def abegin(client: Any, key: str, ttl_ms: int = DEFAULT_TTL_MS, *,
                 renew: bool = False) -> Any:
    """:func:`begin` for an AsyncRedlockClient."""
    try:
        return await client.acquire(key, ttl_ms=ttl_ms, renew=renew)
    except BusyError:
        return BUSY
    except DoneError:
        return DONE


async def afinish(client: Any, lock: Any, ok: bool,
                  keep_ms: int = DEFAULT_KEEP_MS) -> None:
    """:func:`finish` for an AsyncRedlockClient."""
    try:
        if ok:
            await client.complete(lock, keep_ms=keep_ms)
        else:
            await client.release(lock)
    except RedlockError as e:
        _log_finish_error(lock, ok, e)


async def aprocess_once(client: Any, key: str,
                        handler: Callable[..., Union[Any, Awaitable[Any]]],
                        ttl_ms: int = DEFAULT_TTL_MS,
                        keep_ms: int = DEFAULT_KEEP_MS, *,
                        renew: bool = False) -> Any:
    """:func:`process_once` for an AsyncRedlockClient; ``handler()`` (or
    ``handler(lock)``) may return an awaitable (an ``async def`` handler),
    which is awaited.  If the lock is lost meanwhile (with ``renew``: the
    daemon could not keep it), the handler is cancelled and LockLostError
    raised; nothing is marked done, so a redelivery runs it again."""
    lock = await abegin(client, key, ttl_ms, renew=renew)
    if isinstance(lock, Skipped):
        return lock
    try:
        async with cancel_on_lost(lock):
            result = _call(handler, lock)
            if hasattr(result, "__await__"):
                result = await result
    except BaseException:
        # Also on cancellation: a cancelled handler did not finish its work.
        await afinish(client, lock, False)
        raise
    await afinish(client, lock, True, keep_ms)
    return result


def _log_finish_error(lock: Any, ok: bool, e: Exception) -> None:
    what = "complete" if ok else "release"
    resource = getattr(lock, "resource", lock)
    if ok:
        # The work is done but the done mark is not: a redelivery after the
        # lock expires would run it again.  Make the handler's TTL longer.
        log.warning("dedup: %s of '%s' failed after the handler succeeded "
                    "(a redelivery may run it again): %s", what, resource, e)
    else:
        log.info("dedup: %s of '%s' after a failed handler: %s", what,
                 resource, e)

