"""locks(), iter_locks() and inspect() (sync and asyncio) against a real
daemon: the pages, the states, and that no token is ever in an answer."""

import asyncio
import json
import os

import pytest

from conftest import rname
from redlockd import AsyncRedlockClient, BadRequestError


def test_locks_and_inspect_sync(client):
    tag = rname("pyls")
    held = [client.acquire("%s:%d" % (tag, i), ttl_ms=20000, fence=(i == 0))
            for i in range(5)]
    try:
        page = client.locks(prefix=tag + ":", limit=2)
        assert page["count"] == 2 and "next" in page, page
        assert [e["resource"] for e in page["locks"]] == [
            tag + ":0", tag + ":1"]
        first = page["locks"][0]
        assert first["owner"]["pid"] == os.getpid(), first
        assert first["fence"] == held[0].fence, first
        everything = [e["resource"] for e in client.iter_locks(
            prefix=tag + ":", limit=2)]
        assert everything == ["%s:%d" % (tag, i) for i in range(5)]
        text = json.dumps(client.locks(prefix=tag + ":"))
        assert not any(lk.token in text for lk in held), text

        info = client.inspect(tag + ":0", fence=True)
        assert info["state"] == "held" and info["mine"] is True, info
        assert info["agree"] >= 3 and 0 < info["pttl_ms"] <= 20000, info
        assert info["fence"] >= held[0].fence, info
        assert held[0].token not in json.dumps(info)
        assert client.inspect(rname("pyfree"))["state"] == "free"
        with pytest.raises(BadRequestError):
            client.locks(limit=0)
    finally:
        for lk in held:
            lk.release()
    assert client.locks(prefix=tag + ":")["locks"] == []


def test_locks_and_inspect_async(sock):
    async def main():
        tag = rname("pyals")
        async with AsyncRedlockClient(sock) as c:
            a = await c.acquire(tag + ":a", ttl_ms=20000)
            b = await c.acquire(tag + ":b", ttl_ms=20000)
            page = await c.locks(prefix=tag + ":")
            assert [e["resource"] for e in page["locks"]] == [
                tag + ":a", tag + ":b"], page
            seen = [e["resource"] async for e in c.iter_locks(
                prefix=tag + ":", limit=1)]
            assert seen == [tag + ":a", tag + ":b"]
            info = await c.inspect(tag + ":a")
            assert info["state"] == "held" and info["mine"] is True, info
            await a.release()
            info = await c.inspect(tag + ":a")
            assert info["state"] == "free", info
            await b.complete(keep_ms=5000)
            info = await c.inspect(tag + ":b")
            assert info["state"] == "done" and info["mine"] is False, info
    asyncio.run(asyncio.wait_for(main(), 30))


def test_permits_sync(client, sock):
    from redlockd import BusyError, RedlockClient
    r = rname("pysem")
    held = [client.acquire(r, ttl_ms=20000, permits=2) for _ in range(2)]
    assert sorted(lk.permit for lk in held) == [0, 1]
    with pytest.raises(BusyError):
        client.acquire(r, permits=2)
    # Another client (another connection) releases a permit with its
    # resource and permit.
    with RedlockClient(sock) as other:
        other.release(held[0])
        with other.lock(r, permits=2, ttl_ms=5000) as lk:
            assert lk.permit == held[0].permit
    held[1].extend(30000)
    held[1].release()
    assert client.locks(prefix=r)["locks"] == []


def test_permits_async(sock):
    async def main():
        r = rname("pyasem")
        async with AsyncRedlockClient(sock) as c:
            a = await c.acquire(r, permits=3, ttl_ms=20000)
            async with c.lock(r, permits=3) as b:
                assert {a.permit, b.permit} <= {0, 1, 2}
                assert a.permit != b.permit
                page = await c.locks(prefix=r)
                assert sorted(e["permit"] for e in page["locks"]) == sorted(
                    [a.permit, b.permit])
            await a.release()
    asyncio.run(asyncio.wait_for(main(), 30))
