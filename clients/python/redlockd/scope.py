"""Run asyncio work under a lock, cancelled the moment the lock is lost.

    async with scope.cancel_on_lost(lock):
        await work(fence=lock.fence)      # cancelled if the lock is lost

The daemon sends the ``lost`` event before the lock's validity ends (and a
closed connection loses its session locks at once), so cancelling on it
stops the work while no one else can hold the lock yet.  Leaving the block
after such a cancellation raises :class:`~redlockd.LockLostError` instead
of ``CancelledError``; a cancellation that came from elsewhere stays a
``CancelledError``.  Used by ``redlockd.leader``, ``redlockd.dedup`` and
``redlockd.aiogram``; usable on its own with any ``AsyncLock``.

:func:`run_until_lost` is the same for one awaitable run in a task of its
own, for frameworks where the current task must not be cancelled (it may
be the framework's own loop, as python-telegram-bot's update fetcher is).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from .errors import LockLostError

__all__ = ["cancel_on_lost", "run_until_lost", "lost_error"]


def lost_error(lock: Any, what: str = "lock") -> LockLostError:
    """The LockLostError for ``lock`` (its resource and why it ended)."""
    return LockLostError("%s on '%s' lost (%s)" % (
        what, getattr(lock, "resource", "?"),
        getattr(lock, "lost_reason", None) or "lost"), lock=lock)


class cancel_on_lost:  # noqa: N801 - used like a function
    """``async with cancel_on_lost(lock):`` cancels the current task when
    ``lock.lost`` is set while the block runs, and turns that cancellation
    into :class:`LockLostError` (``what`` names the lock in its message)."""

    def __init__(self, lock: Any, what: str = "lock") -> None:
        self.lock = lock
        self.what = what
        self._task: Optional["asyncio.Task[Any]"] = None
        self._watch: Optional["asyncio.Future[Any]"] = None
        self._fired = False

    async def __aenter__(self) -> Any:
        if self.lock.lost.is_set():
            raise lost_error(self.lock, self.what)
        self._task = asyncio.current_task()
        self._watch = asyncio.ensure_future(self._watcher())
        return self.lock

    async def _watcher(self) -> None:
        await self.lock.lost.wait()
        if self._task is not None and not self._task.done():
            self._fired = True
            self._task.cancel()

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> bool:
        watch = self._watch
        if watch is not None and not watch.done():
            watch.cancel()
        if not self._fired:
            return False
        if et is None:
            # The block finished before our cancellation reached it: take
            # the pending cancellation here, not at the caller's next await.
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                pass
        uncancel = getattr(self._task, "uncancel", None)
        if uncancel is not None:
            uncancel()
        if et is None or issubclass(et, asyncio.CancelledError):
            raise lost_error(self.lock, self.what) from ev
        return False  # the block's own exception wins


async def run_until_lost(lock: Any, aw: Any, what: str = "lock") -> Any:
    """Await ``aw`` in a task of its own; if ``lock.lost`` is set first,
    cancel that task (and only it), wait for it to end and raise
    :class:`LockLostError`.  Returns what ``aw`` returns."""
    if lock.lost.is_set():
        if asyncio.iscoroutine(aw):
            aw.close()
        raise lost_error(lock, what)
    work = asyncio.ensure_future(aw)
    lost = asyncio.ensure_future(lock.lost.wait())
    try:
        await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        work.cancel()
        raise
    finally:
        lost.cancel()
    if work.done():
        return work.result()
    work.cancel()
    try:
        await work
    except asyncio.CancelledError:
        pass
    raise lost_error(lock, what)
