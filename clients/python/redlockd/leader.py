"""Leader election over redlockd: one leader at a time, standbys in line.

    from redlockd import RedlockClient, leader

    with leader.lead(RedlockClient(), "tg:poller") as term:   # waits its turn
        while not term.lost.is_set():
            poll_once(fence=term.fence)

    async with leader.lead(AsyncRedlockClient(), "tg:poller") as term:
        await poll_forever(term)      # cancelled at once if leadership is lost

A campaign acquires the resource with ``renew`` and ``fence`` and waits in
the daemon's FIFO (standbys on one daemon are served in arrival order; a
standby on another daemon wakes on the release's pub/sub announcement, or
after the TTL when the leader's daemon died).  The daemon's wait is bounded
(``wait_ms`` <= 300000), so the campaign waits in rounds of ``round_ms``
and goes on after each ``busy``; after an error that may pass (no quorum,
connection lost, daemon shutting down) it backs off and tries again.

Leadership ends when the daemon reports the lock lost (sent before its
validity ends), when the connection that holds it closes, or when the
block is left: leaving resigns (releases) and the next standby leads at
once.  asyncio: the block is cancelled on loss and raises
:class:`~redlockd.LockLostError`.  Sync: ``term.lost`` is set, and leaving
the block normally after a loss raises LockLostError (the block ran partly
without leadership).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from typing import Any, Callable, Optional

from ._proto import log
from .errors import (BusyError, ConnectionLostError, LimitError,
                     NoQuorumError, NotHeldError, RedlockError,
                     RequestTimeoutError, ShuttingDownError)
from .scope import cancel_on_lost, lost_error

__all__ = ["lead", "run_as_leader", "Leadership", "DEFAULT_TTL_MS",
           "MAX_ROUND_MS"]

DEFAULT_TTL_MS = 5000     # a dead leader's daemon hands over within this
MAX_ROUND_MS = 300000     # the daemon's largest wait_ms
STOP_ROUND_MS = 1000      # the longest round of a campaign with a stop event
_RETRYABLE = (NoQuorumError, ConnectionLostError, RequestTimeoutError,
              ShuttingDownError, LimitError)


def _backoff(n: int) -> float:
    return min(2.0, 0.05 * (2 ** min(n, 6))) * random.uniform(0.5, 1.0)


class Leadership:
    """One term of leadership (returned by :func:`lead`).

    ``lock`` is the renewing lock that is the leadership; ``fence`` its
    fencing token (pass it to what the leader writes: a later leader's is
    larger); ``lost`` the lock's Event; ``resource``.  Use it as a
    ``with`` (RedlockClient) or ``async with`` (AsyncRedlockClient) block,
    or call :meth:`campaign` / :meth:`resign` yourself.
    """

    def __init__(self, client: Any, resource: str,
                 ttl_ms: int = DEFAULT_TTL_MS, *,
                 round_ms: int = MAX_ROUND_MS,
                 timeout: Optional[float] = None,
                 stop: Optional[threading.Event] = None) -> None:
        if not 0 < round_ms <= MAX_ROUND_MS:
            raise ValueError("round_ms must be in 1..%d" % MAX_ROUND_MS)
        self.client = client
        self.resource = resource
        self.ttl_ms = ttl_ms
        self.round_ms = round_ms
        self.timeout = timeout
        self.stop = stop
        self.lock: Any = None
        self._scope: Optional[cancel_on_lost] = None

    @property
    def fence(self) -> Optional[int]:
        return None if self.lock is None else self.lock.fence

    @property
    def lost(self) -> Any:
        if self.lock is None:
            raise RuntimeError("not leading: campaign first")
        return self.lock.lost

    def _round(self, deadline: Optional[float]) -> int:
        # A sync acquire cannot be cut short: with a stop event, rounds of
        # at most STOP_ROUND_MS bound how long a set stop goes unseen.
        limit = self.round_ms if self.stop is None else \
            min(self.round_ms, STOP_ROUND_MS)
        if deadline is None:
            return limit
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            raise BusyError("no leadership of '%s' within the timeout"
                            % self.resource)
        return min(limit, left)

    def _acquire_args(self, wait_ms: int) -> dict:
        return dict(ttl_ms=self.ttl_ms, wait_ms=wait_ms, renew=True,
                    fence=True)

    # -- sync --------------------------------------------------------------

    def campaign(self) -> Any:
        """Wait until leading (RedlockClient); returns the lock.  Raises
        BusyError when ``timeout`` passes first, ConnectionLostError when
        the client was closed, DoneError/BadRequestError as acquire does."""
        deadline = None if self.timeout is None else \
            time.monotonic() + self.timeout
        failures = 0
        while True:
            if self.stop is not None and self.stop.is_set():
                raise BusyError("campaign for '%s' stopped" % self.resource)
            args = self._acquire_args(self._round(deadline))
            try:
                self.lock = self.client.acquire(self.resource, **args)
                return self.lock
            except BusyError:
                failures = 0            # a round ran out: wait another
            except _RETRYABLE as e:
                if getattr(self.client, "closed", False):
                    raise
                failures += 1
                log.info("leader: campaign for '%s': %s; retrying",
                         self.resource, e)
                pause = _backoff(failures)
                if self.stop is not None:
                    self.stop.wait(pause)
                else:
                    time.sleep(pause)

    def resign(self) -> None:
        """Release leadership now: the next standby leads at once."""
        lock, self.lock = self.lock, None
        if lock is None or lock.finished or lock.lost.is_set():
            return
        try:
            self.client.release(lock)
        except NotHeldError:
            pass
        except RedlockError as e:   # it goes with its ttl or its session
            log.warning("leader: resign of '%s': %s", self.resource, e)

    def __enter__(self) -> "Leadership":
        self.campaign()
        return self

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lock = self.lock
        lost = lock is not None and lock.lost.is_set()
        self.resign()
        if lost and et is None:
            raise lost_error(lock, "leadership")

    # -- asyncio -----------------------------------------------------------

    async def acampaign(self) -> Any:
        """:meth:`campaign` for an AsyncRedlockClient."""
        deadline = None if self.timeout is None else \
            time.monotonic() + self.timeout
        failures = 0
        while True:
            args = self._acquire_args(self._round(deadline))
            try:
                self.lock = await self.client.acquire(self.resource, **args)
                return self.lock
            except BusyError:
                failures = 0
            except _RETRYABLE as e:
                if getattr(self.client, "closed", False):
                    raise
                failures += 1
                log.info("leader: campaign for '%s': %s; retrying",
                         self.resource, e)
                await asyncio.sleep(_backoff(failures))

    async def aresign(self) -> None:
        """:meth:`resign` for an AsyncRedlockClient."""
        lock, self.lock = self.lock, None
        if lock is None or lock.finished or lock.lost.is_set():
            return
        try:
            await self.client.release(lock)
        except NotHeldError:
            pass
        except RedlockError as e:
            log.warning("leader: resign of '%s': %s", self.resource, e)

    async def __aenter__(self) -> "Leadership":
        await self.acampaign()
        self._scope = cancel_on_lost(self.lock, "leadership")
        try:
            await self._scope.__aenter__()
        except BaseException:
            await self.aresign()
            raise
        return self

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        scope, self._scope = self._scope, None
        try:
            if scope is not None:
                await scope.__aexit__(et, ev, tb)
        finally:
            await self.aresign()


def lead(client: Any, resource: str, ttl_ms: int = DEFAULT_TTL_MS, *,
         round_ms: int = MAX_ROUND_MS, timeout: Optional[float] = None,
         stop: Optional[threading.Event] = None) -> Leadership:
    """A :class:`Leadership` of ``resource``: ``with lead(c, r) as term``
    (RedlockClient) or ``async with`` (AsyncRedlockClient) waits until
    this process leads, and resigns on leaving.  ``ttl_ms``: how soon a
    leader whose daemon died is replaced (the daemon renews every ttl/3).
    ``round_ms``: one wait in the daemon (<= 300000).  ``timeout``: give up
    (BusyError) after this many seconds; default: wait for ever.  ``stop``
    (sync): a threading.Event that ends the campaign (BusyError) within
    about a second: with it, rounds last at most 1 s, and a standby
    re-queues behind those already waiting at each round's end."""
    return Leadership(client, resource, ttl_ms, round_ms=round_ms,
                      timeout=timeout, stop=stop)


def run_as_leader(client: Any, resource: str, fn: Callable[[Leadership], Any],
                  ttl_ms: int = DEFAULT_TTL_MS, **kwargs: Any) -> Any:
    """Wait for leadership, run ``fn(term)``, resign; returns fn's result.

    With an AsyncRedlockClient this returns a coroutine and ``fn`` may be
    async: it is cancelled when leadership is lost (LockLostError).  Sync:
    ``fn`` should watch ``term.lost``; a loss raises LockLostError after it
    returns."""
    if getattr(client, "is_async", False):
        return _arun_as_leader(client, resource, fn, ttl_ms, **kwargs)
    with lead(client, resource, ttl_ms, **kwargs) as term:
        return fn(term)


async def _arun_as_leader(client: Any, resource: str,
                          fn: Callable[[Leadership], Any], ttl_ms: int,
                          **kwargs: Any) -> Any:
    async with lead(client, resource, ttl_ms, **kwargs) as term:
        result = fn(term)
        if hasattr(result, "__await__"):
            result = await result
        return result
