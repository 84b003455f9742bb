"""asyncio redlockd client: asyncio.open_unix_connection, futures by id.

Any number of tasks can have requests in flight on one connection: each
request carries a fresh integer ``id``; a reader task resolves the matching
future (responses may come out of order) and handles unsolicited
``{"event":"lost",..}`` messages.  All methods must be called from the
event loop the client connected on.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from typing import (Any, AsyncIterator, Callable, Dict, Optional, Set,
                    Tuple)

from . import _proto
from ._proto import BaseLock, log
from .errors import (ConnectionLostError, NotHeldError, ProtocolError,
                     RedlockError, RequestTimeoutError, error_from_response)

__all__ = ["AsyncRedlockClient", "AsyncLock"]

_PRUNE_EVERY = 256


class AsyncLock(BaseLock):
    """A lock taken by :class:`AsyncRedlockClient`; ``lost`` is an
    asyncio.Event.  ``on_lost(lock)`` may be a function or a coroutine
    function; it runs on the client's event loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lost = asyncio.Event()

    def _mark_lost(self, reason: str, callbacks: bool) -> None:
        if self.lost.is_set() or self._finished:
            return
        self.lost_reason = reason
        self.lost.set()
        if callbacks and self.on_lost is not None:
            self._client._callback(self.on_lost, self)

    async def release(self) -> None:
        await self._client.release(self)

    async def extend(self, ttl_ms: Optional[int] = None) -> "AsyncLock":
        return await self._client.extend(self, ttl_ms)

    async def complete(self, keep_ms: Optional[int] = None) -> None:
        await self._client.complete(self, keep_ms)


class _Pending:
    __slots__ = ("future", "req", "on_lost", "sent_at")

    def __init__(self, future: "asyncio.Future[Any]", req: Dict[str, Any],
                 on_lost: Optional[Callable[[Any], Any]]) -> None:
        self.future = future
        self.req = req
        self.on_lost = on_lost
        # Before the request is written: the lock's validity counts from it.
        self.sent_at = time.monotonic()


class _AConn:
    def __init__(self, client: "AsyncRedlockClient",
                 reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.client = client
        self.reader = reader
        self.writer = writer
        self.pending: Dict[int, _Pending] = {}
        self.abandoned: Dict[int, str] = {}
        self.locks: Dict[str, AsyncLock] = {}
        self.dead = False
        self.daemon_error: Optional[RedlockError] = None
        self.n_added = 0
        self.drain_mu = asyncio.Lock()
        self.task = asyncio.ensure_future(self._read_loop())

    async def send(self, line: bytes, timeout: float) -> None:
        if self.dead:
            return
        try:
            self.writer.write(line)
            async with self.drain_mu:
                await asyncio.wait_for(self.writer.drain(), timeout)
        except (OSError, asyncio.TimeoutError, RuntimeError) as e:
            self.shutdown("send failed: %r" % (e,))

    def abandon(self, rid: int) -> bool:
        p = self.pending.pop(rid, None)
        if p is None:
            return False
        if not self.dead:
            self.abandoned[rid] = p.req["op"]
        return True

    def forget(self, lock: AsyncLock) -> None:
        if self.locks.get(lock.token) is lock:
            del self.locks[lock.token]

    async def _read_loop(self) -> None:
        reason = "daemon closed the connection"
        try:
            while True:
                line = await self.reader.readline()
                if not line:
                    break
                if not line.endswith(b"\n"):
                    reason = "daemon closed the connection mid-line"
                    break
                if line.strip():
                    try:
                        self._dispatch(line)
                    except Exception:
                        log.exception("redlockd: dispatching %r", line[:200])
        except asyncio.CancelledError:
            reason = "client closed"
            self.shutdown(reason, deliberate=True)
            raise
        except (OSError, ValueError, asyncio.LimitOverrunError) as e:
            reason = "connection error: %r" % (e,)
        self.shutdown(reason)

    def _dispatch(self, line: bytes) -> None:
        msg, bad_id = _proto.decode(line)
        if msg is None:
            log.warning("redlockd: unparseable line from daemon: %r",
                        line[:300])
            p = self.pending.pop(bad_id, None) if bad_id is not None else None
            if p is not None and not p.future.done():
                p.future.set_exception(ProtocolError(
                    "unparseable response from daemon: %r" % line[:300]))
            return
        if "event" in msg:
            self._event(msg)
            return
        rid = msg.get("id")
        if rid is None:
            if msg.get("ok") is False:
                self.daemon_error = error_from_response(msg)
            log.warning("redlockd: response without id: %r", msg)
            return
        if not isinstance(rid, int):
            log.debug("redlockd: answer to unknown id %r", rid)
            return
        p = self.pending.pop(rid, None)
        got_lock = msg.get("ok") is True and isinstance(msg.get("lock"), str)
        if p is not None:
            result: Any = msg
            if p.req["op"] == "acquire" and got_lock:
                lock = _proto.lock_from_response(AsyncLock, self.client, msg,
                                                 p.req, p.on_lost, p.sent_at)
                lock._conn = self
                self.locks[lock.token] = lock
                self._prune()
                result = lock
            if not p.future.done():
                p.future.set_result(result)
            elif isinstance(result, AsyncLock):
                # Its caller gave up (cancelled) at the very last moment.
                self._release_late(result.token, result.resource)
            return
        late_op = self.abandoned.pop(rid, None)
        if late_op == "acquire" and got_lock:
            log.info("redlockd: releasing %s on '%s', acquired after its "
                     "request timed out", msg["lock"], msg.get("resource"))
            self._release_late(msg["lock"], msg.get("resource"))

    def _release_late(self, token: str, resource: Optional[str]) -> None:
        if self.dead:
            return
        self.locks.pop(token, None)
        rid = next(self.client._ids)
        req = _proto.lock_request("release", token, resource)
        req["id"] = rid
        self.abandoned[rid] = "release"
        try:
            self.writer.write(_proto.encode(req))  # drained by the next send
        except (OSError, RuntimeError) as e:
            self.shutdown("send failed: %r" % (e,))

    def _prune(self) -> None:
        self.n_added += 1
        if self.n_added % _PRUNE_EVERY:
            return
        now = time.monotonic()
        for token in [t for t, lk in self.locks.items()
                      if lk._expired_for_good(now)]:
            del self.locks[token]

    def _event(self, msg: Dict[str, Any]) -> None:
        if msg.get("event") == "lost":
            token = msg.get("lock")
            lock = self.locks.pop(token, None) if isinstance(token, str) \
                else None
            if lock is not None:
                lock._mark_lost("lost", callbacks=True)
            log.warning("redlockd: lock %s on '%s' lost", token,
                        msg.get("resource"))
        if self.client.on_event is not None:
            self.client._callback(self.client.on_event, msg)

    def shutdown(self, reason: str, deliberate: bool = False) -> None:
        if self.dead:
            return
        self.dead = True
        pending = list(self.pending.values())
        self.pending.clear()
        self.abandoned.clear()
        locks = list(self.locks.values())
        self.locks.clear()
        try:
            self.writer.close()
        except (OSError, RuntimeError):
            pass
        if not deliberate:
            log.warning("redlockd: connection lost: %s", reason)
        msg = "connection to redlockd closed: %s" % reason
        if self.daemon_error is not None:
            msg += " (after daemon error %s)" % self.daemon_error
        for p in pending:
            if not p.future.done():
                p.future.set_exception(
                    ConnectionLostError(msg, self.daemon_error))
        for lk in locks:
            lk._mark_lost(reason, callbacks=not deliberate)


class AsyncRedlockClient:
    """asyncio client for redlockd's NDJSON protocol.

    Same arguments and methods as :class:`redlockd.RedlockClient`, as
    coroutines.  Use ``async with AsyncRedlockClient(path) as client:`` or
    call ``await client.connect()`` / ``await client.close()``; the first
    request connects too, and the next request after a lost connection
    reconnects.  ``on_event`` may be a function or a coroutine function.
    """

    is_async = True

    def __init__(self, path: Optional[str] = None, *,
                 timeout: float = _proto.DEFAULT_TIMEOUT,
                 connect_timeout: float = _proto.DEFAULT_CONNECT_TIMEOUT,
                 on_event: Optional[Callable[[Dict[str, Any]], Any]] = None
                 ) -> None:
        self.path = _proto.socket_path(path)
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.on_event = on_event
        self._ids = itertools.count(1)
        self._conn: Optional[_AConn] = None
        self._conn_mu: Optional[asyncio.Lock] = None
        self._closed = False
        self._tasks: Set["asyncio.Future[Any]"] = set()

    # -- connection --------------------------------------------------------

    async def connect(self) -> "AsyncRedlockClient":
        await self._connection()
        return self

    @property
    def connected(self) -> bool:
        c = self._conn
        return c is not None and not c.dead

    @property
    def closed(self) -> bool:
        return self._closed

    async def _connection(self) -> _AConn:
        c = self._conn
        if c is not None and not c.dead and not self._closed:
            return c
        if self._conn_mu is None:
            self._conn_mu = asyncio.Lock()
        async with self._conn_mu:
            if self._closed:
                raise ConnectionLostError("client is closed")
            c = self._conn
            if c is not None and not c.dead:
                return c
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_unix_connection(
                        self.path, limit=_proto.MAX_RESPONSE_LINE),
                    self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as e:
                raise _proto.connect_error(self.path, e,
                                           self.connect_timeout) from e
            self._conn = _AConn(self, reader, writer)
            return self._conn

    async def close(self) -> None:
        """Close the connection.  Requests in flight fail with
        ConnectionLostError; the daemon releases this session's locks."""
        self._closed = True
        c = self._conn
        if c is None:
            return
        c.shutdown("client closed", deliberate=True)
        c.task.cancel()
        try:
            await asyncio.wait_for(
                asyncio.gather(c.task, return_exceptions=True), 2.0)
            await asyncio.wait_for(c.writer.wait_closed(), 2.0)
        except (OSError, asyncio.TimeoutError, RuntimeError):
            pass

    async def __aenter__(self) -> "AsyncRedlockClient":
        await self.connect()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _callback(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run a user callback on the loop, outside the reader."""
        def run() -> None:
            try:
                res = fn(*args)
                if inspect.isawaitable(res):
                    t = asyncio.ensure_future(res)
                    self._tasks.add(t)
                    t.add_done_callback(self._tasks.discard)
            except Exception:
                log.exception("redlockd: callback %r raised", fn)
        asyncio.get_running_loop().call_soon(run)

    # -- requests ----------------------------------------------------------

    async def _call(self, req: Dict[str, Any], timeout: float,
                    on_lost: Optional[Callable[[Any], Any]] = None) -> Any:
        conn = await self._connection()
        rid = next(self._ids)
        req = dict(req, id=rid)
        line = _proto.encode(req)
        fut: "asyncio.Future[Any]" = \
            asyncio.get_running_loop().create_future()
        if conn.dead:
            raise ConnectionLostError("connection to redlockd closed",
                                      conn.daemon_error)
        conn.pending[rid] = _Pending(fut, req, on_lost)
        try:
            await conn.send(line, timeout)
            result = await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            if conn.abandon(rid):
                raise RequestTimeoutError(
                    "no answer to %s within %.3g s" % (req["op"], timeout)
                ) from None
            if fut.done() and not fut.cancelled():
                result = fut.result()
            else:
                raise RequestTimeoutError(
                    "no answer to %s within %.3g s" % (req["op"], timeout)
                ) from None
        except asyncio.CancelledError:
            if not conn.abandon(rid) and fut.done() and not fut.cancelled() \
                    and fut.exception() is None and \
                    isinstance(fut.result(), AsyncLock):
                lk = fut.result()
                conn._release_late(lk.token, lk.resource)
            raise
        if isinstance(result, dict) and result.get("ok") is not True:
            raise error_from_response(result)
        return result

    async def request(self, op: str, timeout: Optional[float] = None,
                      **fields: Any) -> Dict[str, Any]:
        """Send any request; returns the response object (raises on error)."""
        req = dict(fields, op=op)
        wait_ms = fields.get("wait_ms")
        t = _proto.request_timeout(self.timeout, wait_ms, timeout)
        result = await self._call(req, t)
        if isinstance(result, AsyncLock):
            out = {"ok": True, "lock": result.token,
                   "resource": result.resource,
                   "validity_ms": result.validity_ms}
            if result.fence is not None:
                out["fence"] = result.fence
            return out
        return result

    async def ping(self, timeout: Optional[float] = None) -> bool:
        await self._call({"op": "ping"},
                         _proto.request_timeout(self.timeout, 0, timeout))
        return True

    async def health(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        res = await self._call({"op": "health"},
                               _proto.request_timeout(self.timeout, 0,
                                                      timeout))
        res.pop("id", None)
        return res

    async def locks(self, prefix: Optional[str] = None,
                    limit: Optional[int] = None,
                    cursor: Optional[str] = None,
                    timeout: Optional[float] = None) -> Dict[str, Any]:
        """One page of this daemon's locks; see RedlockClient.locks()."""
        res = await self._call(_proto.locks_request(prefix, limit, cursor),
                               _proto.request_timeout(self.timeout, 0,
                                                      timeout))
        res.pop("id", None)
        return res

    async def iter_locks(self, prefix: Optional[str] = None,
                         limit: int = 1000,
                         timeout: Optional[float] = None
                         ) -> AsyncIterator[Dict[str, Any]]:
        """Every lock of this daemon, page by page."""
        cursor = None
        while True:
            page = await self.locks(prefix, limit, cursor, timeout)
            for entry in page["locks"]:
                yield entry
            cursor = page.get("next")
            if cursor is None:
                return

    async def inspect(self, resource: str, fence: bool = False,
                      timeout: Optional[float] = None) -> Dict[str, Any]:
        """What the nodes say of ``resource``; see
        RedlockClient.inspect()."""
        res = await self._call(_proto.inspect_request(resource, fence),
                               _proto.request_timeout(self.timeout, 0,
                                                      timeout))
        res.pop("id", None)
        return res

    async def acquire(self, resource: str, ttl_ms: int = 30000,
                      wait_ms: int = 0, renew: bool = False,
                      fence: bool = False,
                      renew_max_ms: Optional[int] = None, *,
                      permits: Optional[int] = None,
                      on_lost: Optional[Callable[[AsyncLock], Any]] = None,
                      timeout: Optional[float] = None) -> AsyncLock:
        req = _proto.acquire_request(resource, ttl_ms, wait_ms, renew, fence,
                                     renew_max_ms, permits)
        t = _proto.request_timeout(self.timeout, wait_ms, timeout)
        result = await self._call(req, t, on_lost)
        if not isinstance(result, AsyncLock):
            raise ProtocolError("acquire answered without a lock: %r"
                                % (result,), response=result)
        return result

    async def release(self, lock: Any, resource: Optional[str] = None, *,
                      timeout: Optional[float] = None) -> None:
        await self._finish("release", lock, resource, timeout)

    async def complete(self, lock: Any, keep_ms: Optional[int] = None,
                       resource: Optional[str] = None, *,
                       timeout: Optional[float] = None) -> None:
        await self._finish("complete", lock, resource, timeout,
                           keep_ms=keep_ms)

    async def _finish(self, op: str, lock: Any, resource: Optional[str],
                      timeout: Optional[float], **fields: Any) -> None:
        req = _proto.lock_request(op, lock, resource, **fields)
        try:
            await self._call(req, _proto.request_timeout(self.timeout, 0,
                                                         timeout))
        except NotHeldError:
            self._forget(lock)
            raise
        self._forget(lock)

    async def extend(self, lock: Any, ttl_ms: Optional[int] = None,
                     resource: Optional[str] = None, *,
                     timeout: Optional[float] = None) -> Any:
        req = _proto.extend_request(lock, resource, ttl_ms)
        sent_at = time.monotonic()
        try:
            res = await self._call(req, _proto.request_timeout(
                self.timeout, 0, timeout))
        except NotHeldError:
            if isinstance(lock, AsyncLock) and lock._conn is not None:
                lock._conn.forget(lock)
            raise
        if isinstance(lock, BaseLock):
            lock._extended(res.get("validity_ms"), sent_at,
                           req.get("ttl_ms"))
            return lock
        return res

    @staticmethod
    def _forget(lock: Any) -> None:
        if isinstance(lock, AsyncLock):
            lock._finished = True
            if lock._conn is not None:
                lock._conn.forget(lock)

    def lock(self, resource: str, ttl_ms: int = 30000, wait_ms: int = 0,
             renew: bool = False, fence: bool = False,
             renew_max_ms: Optional[int] = None, *,
             permits: Optional[int] = None,
             on_lost: Optional[Callable[[AsyncLock], Any]] = None,
             timeout: Optional[float] = None) -> "AsyncLockContext":
        """``async with client.lock("r") as lock:`` acquires, and releases
        on exit (on an exception too)."""
        return AsyncLockContext(self, (resource, ttl_ms, wait_ms, renew,
                                       fence, renew_max_ms),
                                {"on_lost": on_lost, "timeout": timeout,
                                 "permits": permits})


class AsyncLockContext:
    """The async context manager returned by AsyncRedlockClient.lock."""

    def __init__(self, client: AsyncRedlockClient, args: Tuple[Any, ...],
                 kwargs: Dict[str, Any]) -> None:
        self._client = client
        self._args = args
        self._kwargs = kwargs
        self.lock: Optional[AsyncLock] = None

    async def __aenter__(self) -> AsyncLock:
        self.lock = await self._client.acquire(*self._args, **self._kwargs)
        return self.lock

    async def __aexit__(self, et: Any, ev: Any, tb: Any) -> None:
        lock = self.lock
        if lock is None or lock.finished:
            return
        if lock.lost.is_set():
            _proto.exit_lost(lock, et)
            return
        if et is None:
            await self._client.release(lock)
            return
        try:
            await self._client.release(lock)
        except RedlockError as e:
            log.debug("redlockd: release after %s failed: %s",
                      getattr(et, "__name__", et), e)
