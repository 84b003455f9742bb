"""A lock's deadline counts from when the request was sent, never from when
the answer arrived: an answer that comes late (a slow reader, a busy
machine) must not stretch the validity past what the daemon measured.

The delay is put between the daemon's answer and the client's handling of
it, by slowing the connection's dispatch of each response line."""

import asyncio
import time

from conftest import rname
from redlockd import AsyncRedlockClient, RedlockClient
from redlockd import aio as aio_mod
from redlockd import client as client_mod

DELAY = 0.4  # seconds each answer waits before the client handles it


def slow_dispatch(monkeypatch, cls):
    orig = cls._dispatch

    def dispatch(self, line):
        time.sleep(DELAY)
        return orig(self, line)

    monkeypatch.setattr(cls, "_dispatch", dispatch)


def check_deadline(lock, t0, t1):
    # Sent between t0 and t1 (t1 - t0 >= DELAY): the deadline is the send
    # time plus the validity answered, never the answer time plus it.
    assert t1 - t0 >= DELAY
    assert t0 <= lock.acquired_at <= t1 - DELAY + 0.2, (lock.acquired_at, t0)
    assert lock.valid_until <= t0 + 0.2 + lock.validity_ms / 1000.0, (
        lock.valid_until - t0, lock.validity_ms)
    assert lock.valid_until >= t0 + lock.validity_ms / 1000.0


def test_sync_deadline_from_send_time(sock, monkeypatch):
    slow_dispatch(monkeypatch, client_mod._Conn)
    with RedlockClient(sock, timeout=5.0) as c:
        t0 = time.monotonic()
        lock = c.acquire(rname("clock"), ttl_ms=10000)
        t1 = time.monotonic()
        check_deadline(lock, t0, t1)
        t0 = time.monotonic()
        c.extend(lock, ttl_ms=20000)
        t1 = time.monotonic()
        assert lock.validity_ms > 10000
        assert t1 - t0 >= DELAY
        assert t0 + lock.validity_ms / 1000.0 <= lock.valid_until <= \
            t0 + 0.2 + lock.validity_ms / 1000.0, (lock.valid_until - t0)
        c.release(lock)


def test_async_deadline_from_send_time(sock, monkeypatch):
    slow_dispatch(monkeypatch, aio_mod._AConn)

    async def main():
        async with AsyncRedlockClient(sock, timeout=5.0) as c:
            await c.ping()  # connected: the timing below is the request's
            t0 = time.monotonic()
            lock = await c.acquire(rname("aclock"), ttl_ms=10000)
            t1 = time.monotonic()
            check_deadline(lock, t0, t1)
            t0 = time.monotonic()
            await c.extend(lock, ttl_ms=20000)
            t1 = time.monotonic()
            assert t1 - t0 >= DELAY
            assert lock.valid_until <= t0 + 0.2 + lock.validity_ms / 1000.0
            await c.release(lock)

    asyncio.run(asyncio.wait_for(main(), 30))
