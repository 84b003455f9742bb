"""AsyncRedlockClient against a real daemon."""

import asyncio
import re
import time

import pytest

from conftest import rname
from redlockd import (AsyncLock, AsyncRedlockClient, BusyError,
                      ConnectionLostError, DoneError, NotHeldError,
                      RedlockClient, RequestTimeoutError)

TOKEN = re.compile(r"^[0-9a-f]{32}$")


def run(coro, bound=30):
    return asyncio.run(asyncio.wait_for(coro, bound))


def test_ping_acquire_release(sock):
    async def main():
        async with AsyncRedlockClient(sock) as c:
            assert await c.ping() is True
            r = rname()
            lock = await c.acquire(r, ttl_ms=10000, fence=True)
            assert isinstance(lock, AsyncLock)
            assert TOKEN.match(lock.token) and lock.resource == r
            assert isinstance(lock.fence, int)
            assert isinstance(lock.lost, asyncio.Event)
            with pytest.raises(BusyError):
                await c.acquire(r)
            await c.extend(lock, 20000)
            assert lock.validity_ms > 10000
            await c.release(lock)
            with pytest.raises(NotHeldError):
                await c.release(lock)
            lock2 = await c.acquire(r, fence=True)
            assert lock2.fence > lock.fence
            await lock2.complete(keep_ms=5000)
            with pytest.raises(DoneError):
                await c.acquire(r)
    run(main())


def test_lazy_connect_and_health(sock):
    async def main():
        c = AsyncRedlockClient(sock)
        try:
            h = await c.health()
            assert h["ok"] is True and h["quorum"] == 3
            assert len(h["nodes"]) == 5
        finally:
            await c.close()
        with pytest.raises(ConnectionLostError):
            await c.ping()
    run(main())


def test_connect_error_reads_as_the_sync_one(tmp_path):
    # The async client said FileNotFoundError(2, 'No such file or
    # directory') where the sync one says the OS error's text.
    path = str(tmp_path / "nope.sock")
    want = ("cannot connect to redlockd at %s: [Errno 2] No such file or "
            "directory" % path)
    with pytest.raises(ConnectionLostError) as sync_err:
        RedlockClient(path).ping()

    async def main():
        with pytest.raises(ConnectionLostError) as async_err:
            await AsyncRedlockClient(path).ping()
        return str(async_err.value)
    assert str(sync_err.value) == want
    assert run(main()) == want


def test_gather_200_on_one_connection(sock):
    async def main():
        async with AsyncRedlockClient(sock) as c:
            prefix = rname("g")
            names = ["%s:%d" % (prefix, i) for i in range(200)]
            locks = await asyncio.gather(
                *[c.acquire(n, fence=(i % 3 == 0))
                  for i, n in enumerate(names)])
            assert [lk.resource for lk in locks] == names
            assert len({lk.token for lk in locks}) == 200
            # Mixed with pings and duplicates that must be busy.
            results = await asyncio.gather(
                *[c.acquire(n) for n in names[:50]],
                *[c.ping() for _ in range(50)],
                return_exceptions=True)
            assert all(isinstance(x, BusyError) for x in results[:50])
            assert all(x is True for x in results[50:])
            await asyncio.gather(*[lk.release() for lk in locks])
            assert not c._conn.pending and not c._conn.locks
    run(main())


def test_wait_ms(sock):
    async def main():
        r = rname()
        async with AsyncRedlockClient(sock) as a, \
                AsyncRedlockClient(sock) as b:
            held = await a.acquire(r)

            async def later():
                await asyncio.sleep(0.4)
                await a.release(held)

            t0 = time.monotonic()
            got, _ = await asyncio.gather(b.acquire(r, wait_ms=10000),
                                          later())
            waited = time.monotonic() - t0
            assert 0.3 <= waited < 5.0
            await got.release()
    run(main())


def test_renew(sock):
    async def main():
        r = rname()
        async with AsyncRedlockClient(sock) as a, \
                AsyncRedlockClient(sock) as b:
            lock = await a.acquire(r, ttl_ms=300, renew=True)
            for _ in range(15):
                with pytest.raises(BusyError):
                    await b.acquire(r)
                await asyncio.sleep(0.1)
            assert not lock.lost.is_set()
            await lock.release()
    run(main())


def test_lock_context_manager(sock):
    async def main():
        r = rname()
        async with AsyncRedlockClient(sock) as c:
            async with c.lock(r, ttl_ms=5000) as lock:
                with pytest.raises(BusyError):
                    await c.acquire(r)
            assert lock.finished
            with pytest.raises(KeyError):
                async with c.lock(r, renew=True) as lock2:
                    raise KeyError("x")
            assert lock2.finished
            (await c.acquire(r))
    run(main())


def test_session_release_on_close(sock):
    async def main():
        r = rname()
        a = AsyncRedlockClient(sock)
        lock = await a.acquire(r, ttl_ms=60000)
        async with AsyncRedlockClient(sock) as b:
            with pytest.raises(BusyError):
                await b.acquire(r)
            await a.close()
            assert lock.lost.is_set()
            t0 = time.monotonic()
            got = await b.acquire(r, wait_ms=3000)
            assert time.monotonic() - t0 < 2.0
            await got.release()
    run(main())


def test_close_fails_inflight(sock):
    async def main():
        r = rname()
        async with AsyncRedlockClient(sock) as a:
            await a.acquire(r)
            b = AsyncRedlockClient(sock)
            task = asyncio.ensure_future(b.acquire(r, wait_ms=20000))
            await asyncio.sleep(0.3)
            t0 = time.monotonic()
            await b.close()
            with pytest.raises(ConnectionLostError):
                await asyncio.wait_for(task, 5)
            assert time.monotonic() - t0 < 3.0
    run(main())


def test_timeout_and_cancel_release_late_locks(sock):
    async def main():
        r1, r2 = rname(), rname()
        async with AsyncRedlockClient(sock) as a, \
                AsyncRedlockClient(sock) as b, \
                AsyncRedlockClient(sock) as c:
            h1 = await a.acquire(r1)
            h2 = await a.acquire(r2)
            with pytest.raises(RequestTimeoutError):
                await b.acquire(r1, wait_ms=5000, timeout=0.3)
            task = asyncio.ensure_future(b.acquire(r2, wait_ms=5000))
            await asyncio.sleep(0.3)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await a.release(h1)
            await a.release(h2)
            # b's daemon-side waiters win, and b gives both back at once.
            for r in (r1, r2):
                got = await c.acquire(r, wait_ms=5000)
                await got.release()
            assert await b.ping()
    run(main())


def test_release_by_token_and_resource(sock):
    async def main():
        r = rname()
        async with AsyncRedlockClient(sock) as a, \
                AsyncRedlockClient(sock) as b:
            lock = await a.acquire(r)
            await b.release(lock.token, resource=r)
            await (await b.acquire(r)).release()
    run(main())
