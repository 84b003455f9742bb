"""aiogram 3 glue: each update once, one update per chat at a time, across
every worker.

    from redlockd import AsyncRedlockClient
    from redlockd.aiogram import RedlockEventIsolation, UpdateDedupMiddleware

    client = AsyncRedlockClient()              # $REDLOCKD_SOCKET
    dp = Dispatcher(events_isolation=RedlockEventIsolation(client))
    dp.update.outer_middleware(UpdateDedupMiddleware(client))

``UpdateDedupMiddleware``: a duplicate delivery (another worker, a webhook
retry) is skipped while the first is running and after it completed; if
the handler raises, the lock is released so a redelivery can retry.  The
handler gets the lock as its ``lock`` argument (aiogram injects data keys
by name), and is cancelled if the lock is lost.

``RedlockEventIsolation``: aiogram's ``events_isolation`` (what
``SimpleEventIsolation`` does in one process and ``RedisEventIsolation``
with one Redis) over the daemon: updates of one bot+chat+user key are
handled one at a time across all workers, in arrival order per daemon;
other keys run in parallel.  :func:`chat_lock` gives the handler the lock.

aiogram is not imported unless it is installed: the isolation subclasses
``aiogram.fsm.storage.base.BaseEventIsolation`` when it can, and needs only
its interface (``lock(key)`` as an async context manager, ``close()``);
the middleware is a plain callable, duck-typed on ``event.update_id``
(events without one pass through untouched).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Optional

from . import dedup
from .aio import AsyncRedlockClient
from .scope import cancel_on_lost

try:  # pragma: no cover - aiogram is not installable in our CI
    from aiogram.fsm.storage.base import \
        BaseEventIsolation as _BaseEventIsolation
except ImportError:  # aiogram absent: the same interface, no base class
    _BaseEventIsolation = object  # type: ignore[misc,assignment]

__all__ = ["UpdateDedupMiddleware", "RedlockEventIsolation", "chat_lock",
           "isolation_key"]

Handler = Callable[[Any, Dict[str, Any]], Awaitable[Any]]


class UpdateDedupMiddleware:
    """Outer middleware for ``dp.update`` that handles each update once.

    ``client``: an AsyncRedlockClient.  ``ttl_ms``: lock TTL, longer than
    any handler (or pass ``renew=True``).  ``keep_ms``: how long the done
    mark lives.  ``key``: builds the resource from (event, data); the
    default is ``tg:update:<update_id>``; use the bot id too when several
    bots share one daemon::

        key=lambda e, d: f"tg:{d['bot'].id}:{e.update_id}"

    A skipped update returns None without calling the handler.  The
    handler finds the lock in ``data[data_key]`` (default ``"lock"``, so
    ``async def h(message, lock)`` gets it): ``lock.fence``, ``lock.lost``.
    """

    def __init__(self, client: Any, *, ttl_ms: int = dedup.DEFAULT_TTL_MS,
                 keep_ms: int = dedup.DEFAULT_KEEP_MS, renew: bool = False,
                 key: Optional[Callable[[Any, Dict[str, Any]], str]] = None,
                 data_key: str = "lock") -> None:
        if not getattr(client, "is_async", False):
            raise TypeError("UpdateDedupMiddleware needs an "
                            "AsyncRedlockClient")
        self.client = client
        self.ttl_ms = ttl_ms
        self.keep_ms = keep_ms
        self.renew = renew
        self.key = key
        self.data_key = data_key

    async def __call__(self, handler: Handler, event: Any,
                       data: Dict[str, Any]) -> Any:
        update_id = getattr(event, "update_id", None)
        if update_id is None:
            return await handler(event, data)
        key = self.key(event, data) if self.key else \
            dedup.update_key(update_id)

        async def run(lock: Any) -> Any:
            data[self.data_key] = lock
            return await handler(event, data)

        result = await dedup.aprocess_once(
            self.client, key, run, self.ttl_ms, self.keep_ms,
            renew=self.renew)
        if isinstance(result, dedup.Skipped):
            return None
        return result


_chat_lock: "contextvars.ContextVar[Any]" = \
    contextvars.ContextVar("redlockd_chat_lock", default=None)


def chat_lock() -> Any:
    """The AsyncLock :class:`RedlockEventIsolation` holds for the update
    being handled in this task (``fence``, ``lost``), or None."""
    return _chat_lock.get()


def isolation_key(key: Any, prefix: str = "tg:chat:") -> str:
    """The resource for an aiogram ``StorageKey``:
    ``tg:chat:<bot_id>:<chat_id>:<user_id>``, then ``:t<thread_id>``,
    ``:b<business_connection_id>`` and ``:d<destiny>`` when set (the same
    parts as aiogram's own ``DefaultKeyBuilder``)."""
    parts = [str(key.bot_id), str(key.chat_id), str(key.user_id)]
    thread = getattr(key, "thread_id", None)
    if thread is not None:
        parts.append("t%s" % thread)
    business = getattr(key, "business_connection_id", None)
    if business is not None:
        parts.append("b%s" % business)
    destiny = getattr(key, "destiny", "default")
    if destiny not in (None, "default"):
        parts.append("d%s" % destiny)
    return prefix + ":".join(parts)


class RedlockEventIsolation(_BaseEventIsolation):  # type: ignore[misc,valid-type]
    """aiogram ``events_isolation`` across processes, over redlockd.

    ``client``: an AsyncRedlockClient, or None / a socket path to make one
    (closed by :meth:`close`).  ``ttl_ms``: the lock's TTL; it is renewed by
    the daemon while the handler runs, so a dead worker frees the chat
    within it.  ``wait_ms``: how long an update waits for the one before it
    (FIFO in one daemon; at most 300000); after that the update fails with
    BusyError, as aiogram's lock timeout would.  ``key``: StorageKey ->
    resource (default :func:`isolation_key`).

    The handler is cancelled, and LockLostError raised, if the lock is lost
    while it runs (the daemon could not keep a quorum).
    """

    def __init__(self, client: Any = None, *, ttl_ms: int = 30000,
                 wait_ms: int = 60000, fence: bool = True,
                 key: Optional[Callable[[Any], str]] = None) -> None:
        if not 0 <= wait_ms <= 300000:
            raise ValueError("wait_ms must be in 0..300000 (the daemon's "
                             "largest wait)")
        self._owned = client is None or isinstance(client, str)
        if self._owned:
            client = AsyncRedlockClient(client)
        if not getattr(client, "is_async", False):
            raise TypeError("RedlockEventIsolation needs an "
                            "AsyncRedlockClient")
        self.client = client
        self.ttl_ms = ttl_ms
        self.wait_ms = wait_ms
        self.fence = fence
        self.key = key or isolation_key

    @contextlib.asynccontextmanager
    async def lock(self, key: Any) -> AsyncIterator[None]:
        lock = await self.client.acquire(
            self.key(key), ttl_ms=self.ttl_ms, wait_ms=self.wait_ms,
            renew=True, fence=self.fence)
        token = _chat_lock.set(lock)
        try:
            async with cancel_on_lost(lock, "chat lock"):
                yield None
        finally:
            _chat_lock.reset(token)
            if not lock.finished and not lock.lost.is_set():
                try:
                    await self.client.release(lock)
                except Exception as e:  # noqa: BLE001 - expiry, shutdown
                    dedup.log.info("isolation: release of '%s': %s",
                                   lock.resource, e)

    async def close(self) -> None:
        if self._owned:
            await self.client.close()
