"""Wire helpers shared by the sync and asyncio clients (internal)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import socket
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

from .errors import (BadRequestError, ConnectionLostError, NotHeldError,
                     TooLargeError)

log = logging.getLogger("redlockd")

DEFAULT_SOCKET = "./redlockd.sock"
# Client-side slack added to wait_ms for every request's timeout (seconds).
DEFAULT_TIMEOUT = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0
# The daemon's default --max-line-bytes. A longer request line is refused
# here: the daemon would answer too_large and close the connection, and
# with it every session lock this client holds (the Go and Node clients
# refuse it too).
MAX_REQUEST_BYTES = 65536
# Largest response line accepted before the connection is dropped.  The
# daemon's own responses are a few hundred bytes; health grows with nodes.
MAX_RESPONSE_LINE = 16 * 1024 * 1024

# When a response line is not JSON, this still finds the id we sent (always
# an integer, always written first by the daemon) so that the request fails
# at once with a ProtocolError instead of timing out.
_ID_RE = re.compile(rb'^\s*\{\s*"id"\s*:\s*(-?[0-9]+)\s*[,}]')


def socket_path(path: Optional[Union[str, "os.PathLike[str]"]]) -> str:
    """The socket to use: path, else $REDLOCKD_SOCKET, else ./redlockd.sock
    (an empty value counts as none, as in the Go and Node clients)."""
    if path is not None and os.fspath(path):
        return os.fspath(path)
    return os.environ.get("REDLOCKD_SOCKET") or DEFAULT_SOCKET


def connect_error(path: str, e: BaseException,
                  timeout: float) -> ConnectionLostError:
    """Both clients' words for a connect that failed: the OS error as text
    ("[Errno 2] No such file or directory"), not its repr, and a timeout
    (whose text is "timed out", or empty from asyncio) with its length."""
    if isinstance(e, (socket.timeout, asyncio.TimeoutError)):
        why = "timed out after %g s" % timeout
    else:
        why = str(e)
    return ConnectionLostError("cannot connect to redlockd at %s: %s"
                               % (path, why))


def encode(req: Dict[str, Any]) -> bytes:
    """One request as an NDJSON line (UTF-8, compact, newline-terminated)."""
    try:
        text = json.dumps(req, ensure_ascii=False, separators=(",", ":"),
                          allow_nan=False)
        line = text.encode("utf-8") + b"\n"
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        raise BadRequestError("cannot encode request: %s" % e) from None
    if len(line) - 1 > MAX_REQUEST_BYTES:  # the daemon does not count "\n"
        raise TooLargeError("request line of %d bytes is over %d (not sent)"
                            % (len(line) - 1, MAX_REQUEST_BYTES))
    return line


def decode(line: bytes) -> Tuple[Optional[Dict[str, Any]], Optional[int]]:
    """(message, None) for a JSON object line; (None, id or None) otherwise."""
    try:
        msg = json.loads(line)
    except ValueError:
        m = _ID_RE.match(line)
        return None, int(m.group(1)) if m else None
    if not isinstance(msg, dict):
        return None, None
    return msg, None


def acquire_request(resource: str, ttl_ms: int, wait_ms: int, renew: bool,
                    fence: bool, renew_max_ms: Optional[int],
                    permits: Optional[int] = None) -> Dict[str, Any]:
    req: Dict[str, Any] = {"op": "acquire", "resource": resource,
                           "ttl_ms": ttl_ms, "wait_ms": wait_ms}
    if renew:
        req["renew"] = True
    if fence:
        req["fence"] = True
    if renew_max_ms is not None:
        req["renew_max_ms"] = renew_max_ms
    if permits is not None:
        req["permits"] = permits
    return req


def locks_request(prefix: Optional[str], limit: Optional[int],
                  cursor: Optional[str]) -> Dict[str, Any]:
    """locks: one page of the daemon's own locks."""
    req: Dict[str, Any] = {"op": "locks"}
    if prefix:
        req["prefix"] = prefix
    if limit is not None:
        req["limit"] = limit
    if cursor is not None:
        req["cursor"] = cursor
    return req


def inspect_request(resource: str, fence: bool) -> Dict[str, Any]:
    req: Dict[str, Any] = {"op": "inspect", "resource": resource}
    if fence:
        req["fence"] = True
    return req


def lock_request(op: str, lock: Any, resource: Optional[str],
                 **fields: Any) -> Dict[str, Any]:
    """release/extend/complete: always send the resource with the token, so
    that any daemon (a restarted one, another one) can act on it."""
    permit = None
    if isinstance(lock, BaseLock):
        token = lock.token
        if resource is None:
            resource = lock.resource
            permit = lock.permit
    elif isinstance(lock, str):
        token = lock
    else:
        raise TypeError("lock must be a Lock or a token string, not %s"
                        % type(lock).__name__)
    req: Dict[str, Any] = {"op": op, "lock": token}
    if resource is not None:
        req["resource"] = resource
    if permit is not None:
        req["permit"] = permit  # a semaphore's permit: any daemon finds it
    for k, v in fields.items():
        if v is not None:
            req[k] = v
    return req


def extend_request(lock: Any, resource: Optional[str],
                   ttl_ms: Optional[int]) -> Dict[str, Any]:
    """extend: without ttl_ms, a Lock's own ttl (taken with, or last
    extended to).  Left out, the daemon would use the ttl it knows, and a
    daemon that does not know the lock (another one, or one restarted)
    its default of 30000 instead."""
    if ttl_ms is None and isinstance(lock, BaseLock):
        ttl_ms = lock.ttl_ms
    return lock_request("extend", lock, resource, ttl_ms=ttl_ms)


def request_timeout(slack: float, wait_ms: Any = 0,
                    timeout: Optional[float] = None) -> float:
    if timeout is not None:
        return timeout
    # A wait_ms that is not a number is the daemon's to refuse (its
    # bad_request names the field), not a TypeError from max() here.
    if not isinstance(wait_ms, (int, float)) or isinstance(wait_ms, bool):
        wait_ms = 0
    return max(0, wait_ms) / 1000.0 + slack


class BaseLock:
    """A lock held through redlockd.

    ``token`` (32 hex chars), ``resource``, ``validity_ms`` (as answered by
    the last acquire or extend), ``fence`` (an int when asked for, else
    None), ``ttl_ms`` (taken with, or last extended to), ``renew``,
    ``acquired_at`` (time.monotonic() when the acquire was sent: the
    validity counts from there, never from the answer, which may come
    late), ``valid_until`` (``acquired_at`` plus the validity),
    ``lost`` (an Event, set when the daemon reports the lock lost or the
    connection that holds it closes), ``lost_reason`` and ``on_lost`` (a
    callback, called with the lock once when it is lost); ``permit``, which
    permit of a semaphore it is (acquired with ``permits=``), else None.
    """

    def __init__(self, client: Any, token: str, resource: str,
                 validity_ms: int, fence: Optional[int], ttl_ms: int,
                 renew: bool = False, renew_max_ms: Optional[int] = None,
                 on_lost: Optional[Callable[[Any], Any]] = None) -> None:
        self.token = token
        self.resource = resource
        self.validity_ms = validity_ms
        self.fence = fence
        self.ttl_ms = ttl_ms
        self.renew = renew
        self.renew_max_ms = renew_max_ms
        self.acquired_at = time.monotonic()
        self.valid_until = self.acquired_at + validity_ms / 1000.0
        self.on_lost = on_lost
        self.lost_reason: Optional[str] = None
        self.permit: Optional[int] = None
        self._client = client
        self._conn: Any = None      # the connection whose session holds it
        self._finished = False      # released or completed by us

    @property
    def finished(self) -> bool:
        """True once released or completed through a client."""
        return self._finished

    def _expired_for_good(self, now: float) -> bool:
        """A lock the daemon no longer keeps: past validity, not renewing."""
        if self.renew:
            if not self.renew_max_ms:
                return False
            return now > (self.acquired_at + self.renew_max_ms / 1000.0
                          + self.ttl_ms / 1000.0)
        return now > self.valid_until

    def _extended(self, validity_ms: Any, sent_at: float,
                  ttl_ms: Any = None) -> None:
        """sent_at: time.monotonic() before the extend was sent; ttl_ms:
        the one it sent, now the lock's ttl."""
        if isinstance(validity_ms, int):
            if isinstance(ttl_ms, int):
                self.ttl_ms = ttl_ms
            self.validity_ms = validity_ms
            self.valid_until = sent_at + validity_ms / 1000.0

    def __repr__(self) -> str:
        state = ("lost" if self.lost_reason else
                 "finished" if self._finished else "held")
        return "<%s %s resource=%r validity_ms=%s fence=%s %s>" % (
            type(self).__name__, self.token, self.resource,
            self.validity_ms, self.fence, state)


def exit_lost(lock: BaseLock, et: Any) -> None:
    """Leaving a ``lock()`` block whose lock was lost.  The daemon dropped
    it already (after its lost event, or with the session), so nothing is
    sent: a release could only fail, with whatever the moment gives
    (no_quorum while the nodes are away, a lost connection).  A block that
    ended normally ran partly unprotected: NotHeldError, as documented."""
    if et is None:
        raise NotHeldError("lock on '%s' lost (%s) before the block ended"
                           % (lock.resource, lock.lost_reason or "lost"))


def lock_from_response(cls: Any, client: Any, msg: Dict[str, Any],
                       req: Dict[str, Any],
                       on_lost: Optional[Callable[[Any], Any]],
                       sent_at: float) -> Any:
    """sent_at: time.monotonic() before the acquire was sent; the
    validity the daemon answers counts from a moment after it, so the
    lock's deadline errs early, never late (as in the Go client)."""
    fence = msg.get("fence")
    validity = msg.get("validity_ms")
    lock = cls(client, msg["lock"], msg.get("resource", req.get("resource")),
               validity if isinstance(validity, int) else 0,
               fence if isinstance(fence, int) else None,
               req.get("ttl_ms", 30000), req.get("renew") is True,
               req.get("renew_max_ms"), on_lost)
    permit = msg.get("permit")
    if isinstance(permit, int) and not isinstance(permit, bool):
        lock.permit = permit
    lock.acquired_at = sent_at
    lock.valid_until = sent_at + lock.validity_ms / 1000.0
    return lock
