"""redlockd.aiogram.RedlockEventIsolation (aiogram's events_isolation over
the daemon) and the lock in the handler's hands.

aiogram is not installable here: aiogram_standin.py provides its
documented interface (BaseEventIsolation, StorageKey) and does what its
FSMContextMiddleware does with the isolation.  Two bot processes
(bot_worker.py) handle updates of the same chats at the same time."""

import asyncio
import importlib
import json
import os
import subprocess
import sys

import pytest

import aiogram_standin
from conftest import rname, sleep_until_lost
from redlockd import AsyncRedlockClient, LockLostError

aiogram_standin.install()
import redlockd.aiogram as rl_aiogram  # noqa: E402

rl_aiogram = importlib.reload(rl_aiogram)  # subclass the stand-in's base
aiogram_standin.uninstall()

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "bot_worker.py")


def overlaps(a, b):
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_same_chat_never_overlaps_across_two_bot_processes(daemon, sock):
    bot = int(rname("bot").rsplit(":", 1)[1][:6], 16)  # fresh keys per run
    argv = [sys.executable, WORKER, sock, str(bot), "1,2", "3", "200"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE)
             for _ in range(2)]
    seen = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        seen += json.loads(out)
    assert len(seen) == 12
    assert {s["resource"] for s in seen} == {
        "tg:chat:%d:1:1" % bot, "tg:chat:%d:2:2" % bot}
    for chat in (1, 2):
        mine = sorted((s for s in seen if s["chat"] == chat),
                      key=lambda s: s["start"])
        assert len({s["pid"] for s in mine}) == 2  # both processes served it
        for prev, cur in zip(mine, mine[1:]):
            assert not overlaps(prev, cur), (prev, cur)
            assert cur["fence"] > prev["fence"]
    # The other chat ran meanwhile: isolation is per chat, not global.
    ones = [s for s in seen if s["chat"] == 1]
    twos = [s for s in seen if s["chat"] == 2]
    assert any(overlaps(a, b) for a in ones for b in twos)


def test_isolation_key_and_interface():
    k = aiogram_standin.StorageKey(bot_id=7, chat_id=-100, user_id=5)
    assert rl_aiogram.isolation_key(k) == "tg:chat:7:-100:5"
    k = aiogram_standin.StorageKey(bot_id=7, chat_id=1, user_id=2,
                                   thread_id=9, destiny="x")
    assert rl_aiogram.isolation_key(k) == "tg:chat:7:1:2:t9:dx"
    assert issubclass(rl_aiogram.RedlockEventIsolation,
                      aiogram_standin.BaseEventIsolation)
    with pytest.raises(TypeError):
        rl_aiogram.RedlockEventIsolation(object())
    with pytest.raises(ValueError):
        rl_aiogram.RedlockEventIsolation("x.sock", wait_ms=300001)


def test_isolation_wait_is_bounded(daemon, sock):
    async def main():
        async with AsyncRedlockClient(sock) as c:
            iso = rl_aiogram.RedlockEventIsolation(c, wait_ms=200)
            upd = {"chat": 1, "user": int(rname()[-6:], 16)}
            entered = asyncio.Event()

            async def slow(update, data):
                entered.set()
                await asyncio.sleep(1.0)

            first = asyncio.ensure_future(aiogram_standin.feed(iso, slow, upd))
            await entered.wait()
            from redlockd import BusyError
            with pytest.raises(BusyError):
                await aiogram_standin.feed(iso, slow, upd)
            await first
            assert rl_aiogram.chat_lock() is None
            await iso.close()          # not ours: the client stays open
            assert await c.ping()
    asyncio.run(main())


def test_lost_chat_lock_cancels_the_handler(nodes):
    cluster, d = nodes
    seen = []

    async def handler(update, data):
        lock = rl_aiogram.chat_lock()
        seen.append(lock.fence is not None)
        await sleep_until_lost(cluster, (0, 1, 2),
                               lambda: seen.append(lock.lost.is_set()))

    async def main():
        iso = rl_aiogram.RedlockEventIsolation(d.path, ttl_ms=1000)
        try:
            with pytest.raises(LockLostError):
                await asyncio.wait_for(aiogram_standin.feed(
                    iso, handler, {"chat": 3, "user": 4}), 15)
        finally:
            cluster.resume_all()
            await iso.close()
    asyncio.run(main())
    assert seen == [True, True]


def test_dedup_middleware_hands_the_lock_and_cancels_on_lost(nodes):
    cluster, d = nodes
    seen = []

    class Event:
        update_id = int(rname()[-8:], 16)

    async def handler(event, data):
        lock = data["lock"]
        seen.append((lock.resource, lock.lost.is_set()))
        await sleep_until_lost(cluster, (1, 2, 3),
                               lambda: seen.append("cancelled"))

    async def main():
        async with AsyncRedlockClient(d.path) as c:
            mw = rl_aiogram.UpdateDedupMiddleware(c, ttl_ms=1000, renew=True)
            try:
                with pytest.raises(LockLostError):
                    await asyncio.wait_for(mw(handler, Event(), {}), 15)
            finally:
                cluster.resume_all()
    asyncio.run(main())
    assert seen == [("tg:update:%d" % Event.update_id, False), "cancelled"]
