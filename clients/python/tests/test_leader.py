"""redlockd.leader: one leader at a time across processes and two daemons,
handover after a kill, a clean resign handing over at once, campaigns in
bounded rounds, and the loss of leadership reaching user code.

Contenders run as separate processes (leader_worker.py) against two
daemons over the same five redis-servers; their terms are compared on
CLOCK_MONOTONIC, which all processes share."""

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import rname, sleep_until_lost
from redlockd import (AsyncRedlockClient, BusyError, LockLostError,
                      RedlockClient, leader)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "leader_worker.py")


@pytest.fixture
def two(spawn):
    cluster = spawn.cluster()
    d1 = spawn.daemon(nodes=cluster.uris)
    d2 = spawn.daemon(nodes=cluster.uris)
    return spawn, cluster, d1, d2


class Workers:
    def __init__(self, dir_: str) -> None:
        self.out = os.path.join(dir_, "terms.log")
        self.procs = []

    def start(self, sock, resource, mode, terms, hold_ms, ttl_ms):
        p = subprocess.Popen([sys.executable, WORKER, sock, resource,
                              self.out, mode, str(terms), str(hold_ms),
                              str(ttl_ms)], stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def lines(self):
        try:
            with open(self.out) as f:
                return [ln.split() for ln in f.read().splitlines()]
        except FileNotFoundError:
            return []

    def wait_for(self, pred, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = pred(self.lines())
            if got:
                return got
            time.sleep(0.01)
        raise AssertionError("timed out; terms so far: %r" % self.lines())

    def terms(self):
        """[(start_ns, end_ns or None, fence, pid)] in start order."""
        open_ = {}
        done = []
        for ln in self.lines():
            if ln[0] == "start":
                open_[ln[3]] = (int(ln[1]), int(ln[2]))
            else:
                start, fence = open_.pop(ln[2])
                done.append((start, int(ln[1]), fence, ln[2]))
        for pid, (start, fence) in open_.items():
            done.append((start, None, fence, pid))
        return sorted(done)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait(10)


@pytest.fixture
def workers(spawn):
    w = Workers(spawn.dir)
    yield w
    w.stop()


def test_one_leader_at_a_time_across_processes_and_daemons(two, workers):
    _, _, d1, d2 = two
    res = rname("leader")
    ttl = 5000
    for sock, mode in ((d1.path, "sync"), (d2.path, "sync"),
                       (d1.path, "async"), (d2.path, "async")):
        workers.start(sock, res, mode, 3, 150, ttl)
    for p in workers.procs:
        assert p.wait(90) == 0
    terms = workers.terms()
    assert len(terms) == 12, terms
    assert len({t[3] for t in terms}) == 4      # every contender led
    for prev, cur in zip(terms, terms[1:]):
        # One leader at a time: a term begins only after the last ended.
        assert cur[0] >= prev[1], (prev, cur)
        # Fences grow with every new term, whichever daemon granted it.
        assert cur[2] > prev[2], (prev, cur)
        # A clean resign hands over at once, not after the ttl (the
        # standby waits in a daemon, woken by the release).
        assert (cur[0] - prev[1]) / 1e6 < ttl / 2, (prev, cur)


@pytest.mark.parametrize("kill", ["leader process", "leader daemon"])
def test_handover_after_kill_within_ttl(two, workers, kill):
    spawn, _, d1, d2 = two
    res = rname("kill")
    ttl = 2000
    a = workers.start(d1.path, res, "sync", 1, -1, ttl)
    workers.wait_for(lambda ls: any(ln[0] == "start" for ln in ls), 30)
    workers.start(d2.path, res, "async", 1, 100, ttl)
    time.sleep(0.3)  # the standby is waiting in d2 now
    assert len(workers.terms()) == 1
    t_kill = time.monotonic_ns()
    if kill == "leader process":
        a.kill()
    else:
        d1.proc.kill()
        d1.proc.wait(5)
    workers.wait_for(lambda ls: sum(ln[0] == "start" for ln in ls) == 2, 30)
    b_start = workers.terms()[1][0]
    gap_ms = (b_start - t_kill) / 1e6
    assert gap_ms >= 0
    if kill == "leader process":
        # Its session closed: d1 released at once and woke d2's waiter.
        assert gap_ms < ttl, gap_ms
    else:
        # d1 is gone with its lock still on the nodes: the ttl must pass
        # (plus one of the standby's back-off steps).
        assert gap_ms < ttl + 2000, gap_ms
    a.kill()
    a.wait(5)
    if kill == "leader daemon":
        spawn.daemons.remove(d1)


def test_campaign_waits_in_rounds_and_times_out(daemon, sock):
    res = rname("rounds")
    with RedlockClient(sock) as holder, RedlockClient(sock) as c:
        lk = holder.acquire(res, ttl_ms=5000)
        # Rounds of 100 ms (each ends busy) until the holder lets go.
        threading.Timer(0.6, lambda: holder.release(lk)).start()
        t0 = time.monotonic()
        with leader.lead(c, res, 2000, round_ms=100) as term:
            assert time.monotonic() - t0 >= 0.5
            assert term.fence is not None and not term.lost.is_set()
        lk = holder.acquire(res, ttl_ms=5000)
        with pytest.raises(BusyError):
            with leader.lead(c, res, 2000, round_ms=100, timeout=0.35):
                pass
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        with pytest.raises(BusyError):       # a stop event ends a campaign
            leader.lead(c, res, 2000, round_ms=100, stop=stop).campaign()
        holder.release(lk)
        assert leader.run_as_leader(c, res, lambda t: t.fence) > 0
        with pytest.raises(ValueError):
            leader.lead(c, res, round_ms=300001)


def test_stop_ends_a_campaign_waiting_in_a_long_round(daemon, sock):
    """With the default round (300 s) a set stop went unseen until the
    daemon's wait ran out: the campaign's rounds are now at most 1 s when
    a stop event is given, so a stop ends it within about a second."""
    res = rname("leadstop")
    with RedlockClient(sock) as holder, RedlockClient(sock) as c:
        lk = holder.acquire(res, ttl_ms=20000)
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        t0 = time.monotonic()
        with pytest.raises(BusyError):
            leader.lead(c, res, 2000, stop=stop).campaign()
        assert time.monotonic() - t0 < 3.0
        # Without a stop the rounds stay long: a short timeout still ends it.
        with pytest.raises(BusyError):
            leader.lead(c, res, 2000, timeout=0.3).campaign()
        holder.release(lk)


def test_resign_releases_at_once(daemon, sock):
    async def main():
        res = rname("resign")
        async with AsyncRedlockClient(sock) as a, \
                AsyncRedlockClient(sock) as b:
            term = leader.lead(a, res, 30000)
            await term.acampaign()
            standby = asyncio.ensure_future(
                leader.run_as_leader(b, res, lambda t: t.fence))
            await asyncio.sleep(0.2)
            assert not standby.done()
            await term.aresign()
            # Well inside the 30 s ttl: the release woke the standby.
            fence = await asyncio.wait_for(standby, 5)
            assert fence > 0
    asyncio.run(main())


def test_lost_leadership_cancels_async_work(nodes):
    cluster, d = nodes
    seen = []

    async def main():
        async with AsyncRedlockClient(d.path) as c:
            with pytest.raises(LockLostError) as ei:
                async with leader.lead(c, rname("lost"), 1000) as term:
                    await sleep_until_lost(
                        cluster, (0, 1, 2),
                        lambda: seen.append(("cancelled",
                                             term.lost.is_set())))
            seen.append(ei.value.lock.lost_reason)
            cluster.resume_all()
            # The task is usable after it: the cancellation was absorbed.
            await asyncio.sleep(0.01)
    try:
        t0 = time.monotonic()
        asyncio.run(main())
        assert time.monotonic() - t0 < 10
    finally:
        cluster.resume_all()
    assert seen == [("cancelled", True), "lost"]


def test_lost_leadership_sync(nodes):
    cluster, d = nodes
    with RedlockClient(d.path) as c:
        try:
            with pytest.raises(LockLostError):
                with leader.lead(c, rname("lost"), 1000) as term:
                    cluster.pause(2, 3, 4)
                    assert term.lost.wait(10), "no lost event"
        finally:
            cluster.resume_all()


def test_sigterm_worker_is_not_leading_after(two, workers):
    """A contender that dies while waiting leaves no trace in the line."""
    _, _, d1, _ = two
    res = rname("standby")
    a = workers.start(d1.path, res, "async", 1, 400, 3000)
    workers.wait_for(lambda ls: any(ln[0] == "start" for ln in ls), 30)
    b = workers.start(d1.path, res, "sync", 1, 100, 3000)
    time.sleep(0.1)
    b.send_signal(signal.SIGKILL)
    b.wait(5)
    c = workers.start(d1.path, res, "sync", 1, 100, 3000)
    assert a.wait(30) == 0 and c.wait(30) == 0
    terms = workers.terms()
    assert [t[3] for t in terms] == [str(a.pid), str(c.pid)]


def test_standbys_lead_in_arrival_order(daemon, sock):
    """Standbys on one daemon wait FIFO: each resign hands over to the one
    that has waited longest."""
    async def main():
        res = rname("fifo")
        clients = [AsyncRedlockClient(sock) for _ in range(4)]
        order = []
        try:
            first = leader.lead(clients[0], res, 10000)
            await first.acampaign()

            async def standby(k):
                async with leader.lead(clients[k], res, 10000):
                    order.append(k)
                    await asyncio.sleep(0.05)

            tasks = []
            for k in (1, 2, 3):
                tasks.append(asyncio.ensure_future(standby(k)))
                await asyncio.sleep(0.15)  # queued one after the other
            await first.aresign()
            await asyncio.wait_for(asyncio.gather(*tasks), 20)
        finally:
            for c in clients:
                await c.close()
        assert order == [1, 2, 3]
    asyncio.run(main())
