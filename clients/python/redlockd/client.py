"""Synchronous redlockd client: one unix socket, one reader thread.

Any number of threads can have requests in flight on one connection at the
same time: each request carries a fresh integer ``id`` and waits on its own
future; the reader thread matches responses (which may come out of order)
by id and handles unsolicited ``{"event":"lost",..}`` messages.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import socket
import threading
import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from . import _proto
from ._proto import BaseLock, log
from .errors import (ConnectionLostError, NotHeldError, ProtocolError,
                     RedlockError, RequestTimeoutError, error_from_response)

__all__ = ["RedlockClient", "Lock"]

# Locks whose validity passed are forgotten after this many acquisitions.
_PRUNE_EVERY = 256


def _spawn(fn: Callable[..., Any], *args: Any) -> None:
    """Run a user callback off the reader thread (it may call the client)."""
    def run() -> None:
        try:
            fn(*args)
        except Exception:  # a callback must not kill anything of ours
            log.exception("redlockd: callback %r raised", fn)
    threading.Thread(target=run, name="redlockd-callback",
                     daemon=True).start()


class Lock(BaseLock):
    """A lock taken by :class:`RedlockClient`.

    ``lost`` is a threading.Event.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lost = threading.Event()

    def _mark_lost(self, reason: str) -> bool:
        """Set lost; True when on_lost is due (first time, and set)."""
        if self.lost.is_set() or self._finished:
            return False
        self.lost_reason = reason
        self.lost.set()
        return self.on_lost is not None

    def release(self) -> None:
        """Same as ``client.release(lock)``."""
        self._client.release(self)

    def extend(self, ttl_ms: Optional[int] = None) -> "Lock":
        """Same as ``client.extend(lock, ttl_ms)``."""
        return self._client.extend(self, ttl_ms)

    def complete(self, keep_ms: Optional[int] = None) -> None:
        """Same as ``client.complete(lock, keep_ms)``."""
        self._client.complete(self, keep_ms)


class _Pending:
    __slots__ = ("future", "req", "on_lost", "sent_at")

    def __init__(self, req: Dict[str, Any],
                 on_lost: Optional[Callable[[Any], Any]]) -> None:
        self.future: "concurrent.futures.Future[Any]" = \
            concurrent.futures.Future()
        self.req = req
        self.on_lost = on_lost
        # Before the request is written: the lock's validity counts from it.
        self.sent_at = time.monotonic()


class _Conn:
    """One NDJSON connection and its reader thread."""

    def __init__(self, client: "RedlockClient", sock: socket.socket) -> None:
        self.client = client
        self.sock = sock
        self.mu = threading.Lock()         # pending, abandoned, locks, dead
        self.send_mu = threading.Lock()    # one line at a time on the socket
        self.pending: Dict[int, _Pending] = {}
        self.abandoned: Dict[int, str] = {}  # id -> op, for late answers
        self.locks: Dict[str, Lock] = {}     # token -> lock, this session
        self.dead = False
        self.deliberate = False
        self.daemon_error: Optional[RedlockError] = None
        self.n_added = 0
        self.reader = threading.Thread(target=self._read_loop,
                                       name="redlockd-reader", daemon=True)
        self.reader.start()

    # -- sending -----------------------------------------------------------

    def register(self, rid: int, req: Dict[str, Any],
                 on_lost: Optional[Callable[[Any], Any]]) -> _Pending:
        p = _Pending(req, on_lost)
        with self.mu:
            if self.dead:
                raise ConnectionLostError("connection to redlockd closed",
                                          self.daemon_error)
            self.pending[rid] = p
        return p

    def send(self, line: bytes) -> None:
        try:
            with self.send_mu:
                self.sock.sendall(line)
        except OSError as e:
            # A partial line would corrupt the stream: give the connection up.
            self.shutdown("send failed: %s" % e)

    def abandon(self, rid: int) -> bool:
        """Forget a timed-out request; False when its answer already came."""
        with self.mu:
            p = self.pending.pop(rid, None)
            if p is None:
                return False
            if not self.dead:
                self.abandoned[rid] = p.req["op"]
            return True

    def forget(self, lock: Lock) -> None:
        with self.mu:
            if self.locks.get(lock.token) is lock:
                del self.locks[lock.token]

    # -- receiving ---------------------------------------------------------

    def _read_loop(self) -> None:
        buf = bytearray()
        reason = "daemon closed the connection"
        while True:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                if self.dead:
                    reason = "client closed"
                    break
                continue
            except OSError as e:
                reason = "connection error: %s" % e
                break
            if not data:
                break
            buf += data
            start = 0
            while True:
                nl = buf.find(b"\n", start)
                if nl < 0:
                    break
                line = bytes(buf[start:nl])
                start = nl + 1
                if line.strip():
                    try:
                        self._dispatch(line)
                    except Exception:  # never let the reader die silently
                        log.exception("redlockd: dispatching %r", line[:200])
            del buf[:start]
            if len(buf) > _proto.MAX_RESPONSE_LINE:
                reason = "response line over %d bytes" % \
                    _proto.MAX_RESPONSE_LINE
                break
        self.shutdown(reason)

    def _dispatch(self, line: bytes) -> None:
        msg, bad_id = _proto.decode(line)
        if msg is None:
            log.warning("redlockd: unparseable line from daemon: %r",
                        line[:300])
            if bad_id is not None:
                with self.mu:
                    p = self.pending.pop(bad_id, None)
                if p is not None:
                    p.future.set_exception(ProtocolError(
                        "unparseable response from daemon: %r"
                        % line[:300]))
            return
        if "event" in msg:
            self._event(msg)
            return
        rid = msg.get("id")
        if rid is None:
            # No id: the daemon could not read a line of ours (too_large or
            # unparseable); it closes the connection next.
            if msg.get("ok") is False:
                self.daemon_error = error_from_response(msg)
            log.warning("redlockd: response without id: %r", msg)
            return
        with self.mu:
            p = self.pending.pop(rid, None) if isinstance(rid, int) else None
            late_op = self.abandoned.pop(rid, None) if p is None and \
                isinstance(rid, int) else None
            if p is not None and p.req["op"] == "acquire" and \
                    msg.get("ok") is True and isinstance(msg.get("lock"), str):
                lock = _proto.lock_from_response(Lock, self.client, msg,
                                                 p.req, p.on_lost, p.sent_at)
                lock._conn = self
                self.locks[lock.token] = lock
                self._prune_locked()
                result: Any = lock
            else:
                result = msg
        if p is not None:
            p.future.set_result(result)
        elif late_op == "acquire" and msg.get("ok") is True and \
                isinstance(msg.get("lock"), str):
            log.info("redlockd: releasing %s on '%s', acquired after its "
                     "request timed out", msg["lock"], msg.get("resource"))
            _spawn(self._release_late, msg["lock"], msg.get("resource"))
        else:
            log.debug("redlockd: answer to unknown id %r", rid)

    def _release_late(self, token: str, resource: Optional[str]) -> None:
        rid = next(self.client._ids)
        req = _proto.lock_request("release", token, resource)
        req["id"] = rid
        with self.mu:
            if self.dead:
                return
            self.abandoned[rid] = "release"
        self.send(_proto.encode(req))

    def _prune_locked(self) -> None:
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
            with self.mu:
                lock = self.locks.pop(token, None) if isinstance(token, str) \
                    else None
            if lock is not None and lock._mark_lost("lost"):
                _spawn(lock.on_lost, lock)  # type: ignore[arg-type]
            log.warning("redlockd: lock %s on '%s' lost", token,
                        msg.get("resource"))
        if self.client.on_event is not None:
            _spawn(self.client.on_event, msg)

    # -- closing -----------------------------------------------------------

    def shutdown(self, reason: str, deliberate: bool = False) -> None:
        with self.mu:
            if self.dead:
                return
            self.dead = True
            self.deliberate = deliberate
            pending = list(self.pending.values())
            self.pending.clear()
            self.abandoned.clear()
            locks = list(self.locks.values())
            self.locks.clear()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if threading.current_thread() is self.reader:
            self.sock.close()
        else:
            # Wake the reader (shutdown did), let it leave recv, then close.
            self.reader.join(2.0)
            self.sock.close()
        if not deliberate:
            log.warning("redlockd: connection lost: %s", reason)
        msg = "connection to redlockd closed: %s" % reason
        if self.daemon_error is not None:
            msg += " (after daemon error %s)" % self.daemon_error
        for p in pending:
            if not p.future.done():
                p.future.set_exception(
                    ConnectionLostError(msg, self.daemon_error))
        due = [lk for lk in locks if lk._mark_lost(reason)]
        if due and not deliberate:
            _spawn(_call_on_lost, due)  # one thread for all of them


def _call_on_lost(locks: "list[Lock]") -> None:
    for lk in locks:
        try:
            lk.on_lost(lk)  # type: ignore[misc]
        except Exception:
            log.exception("redlockd: on_lost callback %r raised", lk.on_lost)


class RedlockClient:
    """Synchronous client for redlockd's NDJSON protocol.

    ``path``: the daemon's unix socket (default ``$REDLOCKD_SOCKET``, else
    ``./redlockd.sock``).  ``timeout``: client-side time allowed for an
    answer, in seconds, on top of ``wait_ms`` for acquire (default 10).
    ``connect_timeout``: for connecting (default 5).  ``on_event``: called
    with every unsolicited event object (in its own thread).

    The connection is made on first use (or by :meth:`connect`).  When it
    closes under the client, requests in flight fail with
    :class:`ConnectionLostError`, the locks it held are marked lost (the
    daemon releases session locks), and the next request reconnects.
    After :meth:`close` the client cannot be used again.
    """

    is_async = False

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
        self._conn: Optional[_Conn] = None
        self._conn_mu = threading.Lock()
        self._closed = False

    # -- connection --------------------------------------------------------

    def connect(self) -> "RedlockClient":
        """Connect now (otherwise the first request does)."""
        self._connection()
        return self

    @property
    def connected(self) -> bool:
        c = self._conn
        return c is not None and not c.dead

    @property
    def closed(self) -> bool:
        return self._closed

    def _connection(self) -> _Conn:
        with self._conn_mu:
            if self._closed:
                raise ConnectionLostError("client is closed")
            c = self._conn
            if c is not None and not c.dead:
                return c
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(self.connect_timeout)
                sock.connect(self.path)
                # Bounds every send; the reader just loops on recv timeouts.
                sock.settimeout(max(self.timeout, 1.0))
            except OSError as e:
                sock.close()
                raise _proto.connect_error(self.path, e,
                                           self.connect_timeout) from e
            self._conn = _Conn(self, sock)
            return self._conn

    def close(self) -> None:
        """Close the connection.  Requests in flight fail with
        ConnectionLostError; the daemon releases this session's locks."""
        with self._conn_mu:
            self._closed = True
            c = self._conn
        if c is not None:
            c.shutdown("client closed", deliberate=True)

    def __enter__(self) -> "RedlockClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- requests ----------------------------------------------------------

    def _call(self, req: Dict[str, Any], timeout: float,
              on_lost: Optional[Callable[[Any], Any]] = None) -> Any:
        conn = self._connection()
        rid = next(self._ids)
        req = dict(req, id=rid)
        line = _proto.encode(req)
        p = conn.register(rid, req, on_lost)
        conn.send(line)
        try:
            result = p.future.result(timeout)
        except concurrent.futures.TimeoutError:
            if conn.abandon(rid):
                raise RequestTimeoutError(
                    "no answer to %s within %.3g s" % (req["op"], timeout)
                ) from None
            result = p.future.result(0)  # it came in just now
        if isinstance(result, dict) and result.get("ok") is not True:
            raise error_from_response(result)
        return result

    def request(self, op: str, timeout: Optional[float] = None,
                **fields: Any) -> Dict[str, Any]:
        """Send any request; returns the response object (raises on error).

        A low-level escape hatch for fields this client has no method for.
        """
        req = dict(fields, op=op)
        wait_ms = fields.get("wait_ms")
        t = _proto.request_timeout(self.timeout, wait_ms, timeout)
        result = self._call(req, t)
        if isinstance(result, Lock):
            return {"ok": True, "lock": result.token,
                    "resource": result.resource,
                    "validity_ms": result.validity_ms,
                    **({"fence": result.fence} if result.fence is not None
                       else {})}
        return result

    def ping(self, timeout: Optional[float] = None) -> bool:
        """True when the daemon answers."""
        self._call({"op": "ping"}, _proto.request_timeout(self.timeout,
                                                          0, timeout))
        return True

    def health(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Per-node state: {"ok":..,"quorum":N,"nodes":[..]}.

        Raises NoQuorumError when quorum is unreachable (its ``response``
        has the nodes).
        """
        res = self._call({"op": "health"},
                         _proto.request_timeout(self.timeout, 0, timeout))
        res.pop("id", None)
        return res

    def locks(self, prefix: Optional[str] = None, limit: Optional[int] = None,
              cursor: Optional[str] = None,
              timeout: Optional[float] = None) -> Dict[str, Any]:
        """One page of the locks held through this daemon, in the order
        they were taken: {"locks": [..], "count": n, "total": N, "next":
        cursor (only when there may be more)}.  Each entry has resource,
        ttl_ms, validity_ms, renew, fence, held_ms, since_ms, owner and
        waiters; never a token.  Pass ``next`` back as ``cursor``.
        """
        res = self._call(_proto.locks_request(prefix, limit, cursor),
                         _proto.request_timeout(self.timeout, 0, timeout))
        res.pop("id", None)
        return res

    def iter_locks(self, prefix: Optional[str] = None, limit: int = 1000,
                   timeout: Optional[float] = None
                   ) -> Iterator[Dict[str, Any]]:
        """Every lock of this daemon, page by page (see locks())."""
        cursor = None
        while True:
            page = self.locks(prefix, limit, cursor, timeout)
            yield from page["locks"]
            cursor = page.get("next")
            if cursor is None:
                return

    def inspect(self, resource: str, fence: bool = False,
                timeout: Optional[float] = None) -> Dict[str, Any]:
        """What the nodes say of ``resource``, by the quorum rules of
        release: {"state": "free" | "held" | "done", "agree": k,
        "answered": a, "nodes": n, "pttl_ms": .. (held, done), "mine":
        bool, "waiters": w, "fence": .. (when asked)}.  Raises
        NoQuorumError when no state is on more than n - quorum nodes.
        """
        res = self._call(_proto.inspect_request(resource, fence),
                         _proto.request_timeout(self.timeout, 0, timeout))
        res.pop("id", None)
        return res

    def acquire(self, resource: str, ttl_ms: int = 30000, wait_ms: int = 0,
                renew: bool = False, fence: bool = False,
                renew_max_ms: Optional[int] = None, *,
                permits: Optional[int] = None,
                on_lost: Optional[Callable[[Lock], Any]] = None,
                timeout: Optional[float] = None) -> Lock:
        """Take a lock on ``resource``.

        Raises BusyError (held elsewhere, after wait_ms), DoneError
        (completed), NoQuorumError, ... ``renew=True`` makes the daemon
        extend it every ttl/3 until released (``lock.lost`` is set and
        ``on_lost(lock)`` called when it cannot).  ``permits=N`` takes one
        of N permits of a semaphore instead (``lock.permit`` says which).
        The client waits ``timeout`` seconds (default wait_ms + client
        timeout).
        """
        req = _proto.acquire_request(resource, ttl_ms, wait_ms, renew, fence,
                                     renew_max_ms, permits)
        t = _proto.request_timeout(self.timeout, wait_ms, timeout)
        result = self._call(req, t, on_lost)
        if not isinstance(result, Lock):
            raise ProtocolError("acquire answered without a lock: %r"
                                % (result,), response=result)
        return result

    def release(self, lock: Any, resource: Optional[str] = None, *,
                timeout: Optional[float] = None) -> None:
        """Give the lock back (a Lock, or a token with ``resource=``).

        Raises NotHeldError when it is not held any more (expired, lost,
        already released).
        """
        self._finish("release", lock, resource, timeout)

    def complete(self, lock: Any, keep_ms: Optional[int] = None,
                 resource: Optional[str] = None, *,
                 timeout: Optional[float] = None) -> None:
        """Mark the resource done for ``keep_ms`` (daemon default 1 day) and
        drop the lock: later acquires get DoneError until the mark expires."""
        self._finish("complete", lock, resource, timeout, keep_ms=keep_ms)

    def _finish(self, op: str, lock: Any, resource: Optional[str],
                timeout: Optional[float], **fields: Any) -> None:
        req = _proto.lock_request(op, lock, resource, **fields)
        try:
            self._call(req, _proto.request_timeout(self.timeout, 0, timeout))
        except NotHeldError:
            self._forget(lock)
            raise
        self._forget(lock)

    def extend(self, lock: Any, ttl_ms: Optional[int] = None,
               resource: Optional[str] = None, *,
               timeout: Optional[float] = None) -> Any:
        """Push the expiry out to ``ttl_ms`` from now.  Without it, a Lock's
        ``ttl_ms`` (the one it was taken with, or last extended to) is
        sent, whichever daemon this client talks to; for a token the daemon
        picks (see the README).  Returns the lock with a new
        ``validity_ms`` and ``ttl_ms`` (for a token: the response
        object)."""
        req = _proto.extend_request(lock, resource, ttl_ms)
        sent_at = time.monotonic()
        try:
            res = self._call(req, _proto.request_timeout(self.timeout, 0,
                                                         timeout))
        except NotHeldError:
            if isinstance(lock, Lock):
                self._forget_conn(lock)
            raise
        if isinstance(lock, BaseLock):
            lock._extended(res.get("validity_ms"), sent_at,
                           req.get("ttl_ms"))
            return lock
        return res

    @staticmethod
    def _forget_conn(lock: Lock) -> None:
        if lock._conn is not None:
            lock._conn.forget(lock)

    def _forget(self, lock: Any) -> None:
        if isinstance(lock, Lock):
            lock._finished = True
            self._forget_conn(lock)

    def lock(self, resource: str, ttl_ms: int = 30000, wait_ms: int = 0,
             renew: bool = False, fence: bool = False,
             renew_max_ms: Optional[int] = None, *,
             permits: Optional[int] = None,
             on_lost: Optional[Callable[[Lock], Any]] = None,
             timeout: Optional[float] = None) -> "LockContext":
        """``with client.lock("r") as lock:`` acquires, and releases on exit
        (on an exception too).  Leaving the block normally raises
        NotHeldError if the lock was no longer held (expired or lost)."""
        return LockContext(self, (resource, ttl_ms, wait_ms, renew, fence,
                                  renew_max_ms),
                           {"on_lost": on_lost, "timeout": timeout,
                            "permits": permits})


class LockContext:
    """The context manager returned by :meth:`RedlockClient.lock`."""

    def __init__(self, client: RedlockClient, args: Tuple[Any, ...],
                 kwargs: Dict[str, Any]) -> None:
        self._client = client
        self._args = args
        self._kwargs = kwargs
        self.lock: Optional[Lock] = None

    def __enter__(self) -> Lock:
        self.lock = self._client.acquire(*self._args, **self._kwargs)
        return self.lock

    def __exit__(self, et: Any, ev: Any, tb: Any) -> None:
        lock = self.lock
        if lock is None or lock.finished:
            return
        if lock.lost.is_set():
            _proto.exit_lost(lock, et)
            return
        if et is None:
            self._client.release(lock)
            return
        try:
            self._client.release(lock)
        except RedlockError as e:
            log.debug("redlockd: release after %s failed: %s", et.__name__, e)
