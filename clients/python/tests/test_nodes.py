"""Tests that need nodes of our own: lost events, no_quorum, a second daemon,
a daemon restart.  Five redis-servers on unix sockets; three are paused
(SIGSTOP) to take the quorum away, and resumed (SIGCONT) in teardown."""

import asyncio
import threading
import time

import pytest

from conftest import rname
from redlockd import (AsyncRedlockClient, ConnectionLostError, NoQuorumError,
                      NotHeldError, RedlockClient)


def test_lost_event_sync(nodes):
    cluster, d = nodes
    events = []
    called = threading.Event()
    with RedlockClient(d.path, on_event=events.append) as c:
        lock = c.acquire(rname(), ttl_ms=1000, renew=True,
                         on_lost=lambda lk: called.set())
        t0 = time.monotonic()
        cluster.pause(0, 1, 2)
        try:
            assert lock.lost.wait(5), "no lost event"
            elapsed = time.monotonic() - t0
        finally:
            cluster.resume_all()
        assert lock.lost_reason == "lost"
        # Before the validity ran out (1 s ttl), give or take scheduling.
        assert elapsed < 1.5, elapsed
        assert called.wait(2)
        deadline = time.monotonic() + 2
        while not events and time.monotonic() < deadline:
            time.sleep(0.01)
        assert events and events[0]["event"] == "lost"
        assert events[0]["lock"] == lock.token
        assert events[0]["resource"] == lock.resource
        with pytest.raises(NotHeldError):
            c.release(lock)
        assert c.ping()


def test_lost_event_async(nodes):
    cluster, d = nodes

    async def main():
        got = asyncio.Event()

        async def on_lost(lk):
            got.set()

        async with AsyncRedlockClient(d.path) as c:
            lock = await c.acquire(rname(), ttl_ms=1000, renew=True,
                                   on_lost=on_lost)
            cluster.pause(1, 3, 4)
            try:
                await asyncio.wait_for(lock.lost.wait(), 5)
            finally:
                cluster.resume_all()
            await asyncio.wait_for(got.wait(), 2)
            assert lock.lost_reason == "lost"
            assert await c.ping()

    asyncio.run(main())


def test_lock_block_left_after_loss_sync(nodes):
    # Left while the quorum is still away: the README's NotHeldError, not
    # the no_quorum of a release sent for a lock the daemon already dropped.
    cluster, d = nodes
    with RedlockClient(d.path) as c:
        try:
            with pytest.raises(NotHeldError, match="lost"):
                with c.lock(rname(), ttl_ms=1000, renew=True) as lock:
                    cluster.pause(0, 1, 2)
                    assert lock.lost.wait(5), "no lost event"
            cluster.resume_all()
            with pytest.raises(KeyError):  # the block's own error wins
                with c.lock(rname(), ttl_ms=1000, renew=True) as lock:
                    cluster.pause(0, 1, 2)
                    assert lock.lost.wait(5), "no lost event"
                    raise KeyError("mine")
        finally:
            cluster.resume_all()


def test_lock_block_left_after_loss_async(nodes):
    cluster, d = nodes

    async def main():
        async with AsyncRedlockClient(d.path) as c:
            with pytest.raises(NotHeldError, match="lost"):
                async with c.lock(rname(), ttl_ms=1000, renew=True) as lock:
                    cluster.pause(1, 3, 4)
                    await asyncio.wait_for(lock.lost.wait(), 5)

    try:
        asyncio.run(main())
    finally:
        cluster.resume_all()


def test_no_quorum(nodes):
    cluster, d = nodes
    with RedlockClient(d.path) as c:
        c.ping()
        cluster.pause(0, 2, 4)
        try:
            with pytest.raises(NoQuorumError):
                c.acquire(rname(), ttl_ms=1000)
        finally:
            cluster.resume_all()
        deadline = time.monotonic() + 10
        while True:  # nodes come back
            try:
                c.acquire(rname(), ttl_ms=1000)
                break
            except NoQuorumError:
                assert time.monotonic() < deadline
                time.sleep(0.2)


def test_health(nodes):
    _, d = nodes
    with RedlockClient(d.path) as c:
        h = c.health()
        assert h["ok"] is True and h["quorum"] == 3
        assert len(h["nodes"]) == 5
        assert all(n["up"] for n in h["nodes"])


def _health_until_no_quorum(c, bound_s=10.0):
    deadline = time.monotonic() + bound_s
    while True:  # health reports what the daemon has seen of the nodes
        try:
            c.health()
        except NoQuorumError as e:
            return e.response.get("nodes")
        assert time.monotonic() < deadline, "health stayed ok"
        time.sleep(0.2)


def test_health_no_quorum(nodes):
    cluster, d = nodes
    with RedlockClient(d.path) as c:
        c.ping()
        cluster.kill(0, 2, 4)
        nodes_ = _health_until_no_quorum(c)
    assert len(nodes_) == 5
    assert [n["up"] for n in nodes_] == [False, True, False, True, False]


def test_health_no_quorum_hung_nodes(nodes):
    # A hung node keeps its connection: the daemon marks it down once a
    # command has been stuck on it for its stall limit (about 2 s), so an
    # acquire has to go out first.  (An idle daemon keeps showing hung
    # nodes as up: there is no idle probe.)
    cluster, d = nodes
    with RedlockClient(d.path) as c:
        c.ping()
        cluster.pause(0, 2, 4)
        try:
            with pytest.raises(NoQuorumError):
                c.acquire(rname(), ttl_ms=1000)
            nodes_ = _health_until_no_quorum(c, 10.0)
        finally:
            cluster.resume_all()
    assert [n["up"] for n in nodes_] == [False, True, False, True, False]


def test_release_through_another_daemon(nodes, spawn):
    cluster, d1 = nodes
    d2 = spawn.daemon(nodes=cluster.uris)
    r = rname()
    with RedlockClient(d1.path) as c1, RedlockClient(d2.path) as c2:
        lock = c1.acquire(r, ttl_ms=30000)
        c2.extend(lock, 60000)    # the resource travels with the token
        c2.release(lock)
        got = c2.acquire(r)
        c2.release(got)


def test_extend_without_ttl_keeps_the_locks_ttl_on_another_daemon(nodes,
                                                                   spawn):
    # A daemon that did not grant the lock does not know its ttl and took
    # its default (30 s) for an extend without one: a 2 s lock became a
    # 30 s one on the nodes.  The client sends the Lock's own ttl.
    cluster, d1 = nodes
    d2 = spawn.daemon(nodes=cluster.uris)
    r = rname()
    with RedlockClient(d1.path) as c1, RedlockClient(d2.path) as c2:
        lock = c1.acquire(r, ttl_ms=2000)
        c2.extend(lock)
        assert lock.ttl_ms == 2000
        assert lock.validity_ms <= 2000, lock.validity_ms
        assert c1.inspect(r)["pttl_ms"] <= 2000
        # An extend with a ttl makes it the lock's, as on the daemon.
        c1.extend(lock, 3000)
        assert lock.ttl_ms == 3000
        c2.extend(lock)
        assert 2000 < lock.validity_ms <= 3000, lock.validity_ms
        assert c1.inspect(r)["pttl_ms"] <= 3000
        c1.release(lock)

    async def main():
        async with AsyncRedlockClient(d1.path) as a1, \
                AsyncRedlockClient(d2.path) as a2:
            lk = await a1.acquire(r, ttl_ms=2000)
            await a2.extend(lk)
            assert lk.validity_ms <= 2000, lk.validity_ms
            assert (await a1.inspect(r))["pttl_ms"] <= 2000
            await a1.release(lk)

    asyncio.run(main())


def test_daemon_restart_reconnects(nodes):
    _, d = nodes
    r = rname()
    with RedlockClient(d.path) as c:
        lock = c.acquire(r, ttl_ms=30000)
        assert d.stop() == 0      # releases every lock on its way out
        assert lock.lost.wait(5)
        with pytest.raises(ConnectionLostError):
            c.ping()
        d.start()
        assert c.ping()           # reconnected
        c.acquire(r).release()    # the old lock was released at shutdown
