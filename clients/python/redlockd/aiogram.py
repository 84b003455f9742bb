"""aiogram 3 glue: drop duplicate Telegram updates across workers.

    from redlockd import AsyncRedlockClient
    from redlockd.aiogram import UpdateDedupMiddleware

    client = AsyncRedlockClient()              # $REDLOCKD_SOCKET
    dp.update.outer_middleware(UpdateDedupMiddleware(client))

Each update is handled once: a duplicate delivery (another worker, a
webhook retry) is skipped while the first is running and after it
completed.  If the handler raises, the lock is released so a redelivery can
retry.  Nothing is imported from aiogram: the middleware is a plain
callable, duck-typed on ``event.update_id`` (events without one pass
through untouched).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, Optional

from . import dedup

__all__ = ["UpdateDedupMiddleware"]

Handler = Callable[[Any, Dict[str, Any]], Awaitable[Any]]


class UpdateDedupMiddleware:
    """Outer middleware for ``dp.update`` that handles each update once.

    ``client``: an AsyncRedlockClient.  ``ttl_ms``: lock TTL, longer than
    any handler (or pass ``renew=True``).  ``keep_ms``: how long the done
    mark lives.  ``key``: builds the resource from (event, data); the
    default is ``tg:update:<update_id>``; use the bot id too when several
    bots share one daemon::

        key=lambda e, d: f"tg:{d['bot'].id}:{e.update_id}"

    A skipped update returns None without calling the handler.
    """

    def __init__(self, client: Any, *, ttl_ms: int = dedup.DEFAULT_TTL_MS,
                 keep_ms: int = dedup.DEFAULT_KEEP_MS, renew: bool = False,
                 key: Optional[Callable[[Any, Dict[str, Any]], str]] = None
                 ) -> None:
        if not getattr(client, "is_async", False):
            raise TypeError("UpdateDedupMiddleware needs an "
                            "AsyncRedlockClient")
        self.client = client
        self.ttl_ms = ttl_ms
        self.keep_ms = keep_ms
        self.renew = renew
        self.key = key

    async def __call__(self, handler: Handler, event: Any,
                       data: Dict[str, Any]) -> Any:
        update_id = getattr(event, "update_id", None)
        if update_id is None:
            return await handler(event, data)
        key = self.key(event, data) if self.key else \
            dedup.update_key(update_id)
        result = await dedup.aprocess_once(
            self.client, key, lambda: handler(event, data), self.ttl_ms,
            self.keep_ms, renew=self.renew)
        if isinstance(result, dedup.Skipped):
            return None
        return result
