"""Leader election with renewing locks (the Telegram
getUpdates poller). Each contender loops

    acquire(resource="tg:poller", ttl_ms=1000, renew=true, wait_ms=20000)

on its own NDJSON connection and leads from its ok until a lost event or
the connection closes. Terms are recorded with monotonic times; the tests
check that terms never overlap and measure hand-overs."""

import socket
import threading
import time

from rl import (SLOW, Client, Closed, Daemon, Resp, lock_key, poll_until,
                rname)

TTL = 1000


class Contender(threading.Thread):
    """Loops acquire on a fresh connection; records its terms in the shared
    `terms` list as dicts {who, start, end, why}. abdicate() closes the
    leader's connection (the end is recorded before the close); stop() ends
    the loop. When its daemon is gone (connect fails) it stops."""

    def __init__(self, name, sock_path, resource, terms, lock, ttl=TTL):
        super().__init__(name=name, daemon=True)
        self.who = name
        self.path = sock_path
        self.resource = resource
        self.terms = terms
        self.lock = lock
        self.ttl = ttl
        self.stop_flag = threading.Event()
        self.abdicate_flag = threading.Event()
        self.leading = threading.Event()
        self.errors = []
        self.client = None
        self.cur_start = None

    def stop(self):
        self.stop_flag.set()

    def abdicate(self):
        self.abdicate_flag.set()

    def _record(self, start, end, why):
        with self.lock:
            self.terms.append({"who": self.who, "start": start, "end": end,
                               "why": why})

    def run(self):
        for _ in range(1000):
            if self.stop_flag.is_set():
                return
            try:
                c = Client(self.path, timeout=1.0)
            except OSError:
                return  # the daemon is gone
            self.client = c
            try:
                self._one_round(c)
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
            finally:
                self.leading.clear()
                c.close()
            time.sleep(0.01)

    def _one_round(self, c):
        c.send({"op": "acquire", "id": "a", "resource": self.resource,
                "ttl_ms": self.ttl, "renew": True, "wait_ms": 20000})
        rsp = None
        for _ in range(100000):
            if self.stop_flag.is_set():
                return
            try:
                rsp = c.response("a", timeout=0.05)
                break
            except socket.timeout:
                continue
            except Closed:
                return
        if rsp is None or rsp.get("ok") is not True:
            return  # busy after wait_ms, or an error: loop again
        start = time.monotonic()
        self.cur_start = start
        self.leading.set()
        for _ in range(10000000):
            if self.abdicate_flag.is_set() or self.stop_flag.is_set():
                self.abdicate_flag.clear()
                end = time.monotonic()
                self.leading.clear()
                self._record(start, end, "closed")
                c.close()
                return
            try:
                ev = c.wait_event(timeout=0.01)
            except socket.timeout:
                continue
            except Closed:
                end = time.monotonic()
                self.leading.clear()
                self._record(start, end, "connection lost")
                return
            if ev.get("event") == "lost":
                end = time.monotonic()
                self.leading.clear()
                self._record(start, end, "lost event")
                return


def _leaders(cs):
    return [c for c in cs if c.leading.is_set()]


def _wait_leader(cs, timeout, exclude=None):
    val, secs = poll_until(
        lambda: [c for c in _leaders(cs) if c is not exclude], timeout, 0.002)
    return (val[0] if val else None), secs


def _assert_no_overlap(terms):
    ts = sorted(terms, key=lambda t: t["start"])
    for a, b in zip(ts, ts[1:]):
        assert b["start"] >= a["end"], (
            "two leaders at once: %s led until %.3f but %s started at %.3f"
            % (a["who"], a["end"], b["who"], b["start"]))


def _summary(terms):
    if not terms:
        return "(none)"
    t0 = min(t["start"] for t in terms)
    return "; ".join("%s %.0f..%.0f ms (%s)" % (
        t["who"], (t["start"] - t0) * 1000, (t["end"] - t0) * 1000, t["why"])
        for t in sorted(terms, key=lambda t: t["start"]))


def _stop_all(cs):
    for c in cs:
        c.stop()
    for c in cs:
        c.join(timeout=5.0)


def test_one_leader_and_fast_handover(cluster, daemon):
    res = "tg:poller"
    terms, lk = [], threading.Lock()
    cs = [Contender("c%d" % i, daemon.socket, res, terms, lk)
          for i in range(3)]
    handovers = []
    try:
        for c in cs:
            c.start()
            time.sleep(0.05)
        leader, _ = _wait_leader(cs, 5.0)
        assert leader is not None, "nobody leads after 5 s"
        for rnd in range(4):
            # Hold well past the ttl: renewal keeps the leadership and no
            # one else takes it.
            time.sleep(1.5 * TTL / 1000.0)
            assert _leaders(cs) == [leader], (
                "round %d: leaders %r" % (rnd, [c.who for c in _leaders(cs)]))
            n_terms = len(terms)
            leader.abdicate()
            nxt, secs = _wait_leader(cs, 5.0, exclude=leader)
            assert nxt is not None, "no new leader within 5 s of closing " \
                "%s's connection" % leader.who
            poll_until(lambda: len(terms) > n_terms, 2.0, 0.002)
            handovers.append((leader.who, nxt.who, secs * 1000.0))
            leader = nxt
        _stop_all(cs)
        with lk:
            all_terms = list(terms)
        print("terms:", _summary(all_terms))
        print("hand-overs after close (from, to, ms):", handovers)
        for c in cs:
            assert not c.errors, (c.who, c.errors)
        _assert_no_overlap(all_terms)
        assert not [t for t in all_terms if t["why"] != "closed"], (
            "a leader lost its term without closing: %s" % _summary(
                all_terms))
        # Every hand-over is prompt (a waiter is woken by the local release).
        for frm, to, ms in handovers:
            assert ms < 1000.0 * SLOW, handovers
        # Hand-over gap measured from the recorded end to the next start.
        ts = sorted(all_terms, key=lambda t: t["start"])
        gaps = [(b["start"] - a["end"]) * 1000 for a, b in zip(ts, ts[1:])]
        print("gaps between terms (ms): %s" % ", ".join(
            "%.1f" % g for g in gaps))
        assert all(g < 1000.0 * SLOW for g in gaps), gaps
    finally:
        _stop_all(cs)


def test_leader_daemon_killed_handover_after_ttl(cluster, daemon_factory):
    res = rname("tg:poller")
    key = lock_key(res)
    terms, lk = [], threading.Lock()
    da = Daemon(cluster, name="la")
    da.start()
    cs = []
    try:
        db = daemon_factory.start(cluster, name="lb")
        a1 = Contender("a1", da.socket, res, terms, lk)
        a1.start()
        lead, _ = _wait_leader([a1], 5.0)
        assert lead is a1, "a1 did not lead"
        a2 = Contender("a2", da.socket, res, terms, lk)
        b1 = Contender("b1", db.socket, res, terms, lk)
        b2 = Contender("b2", db.socket, res, terms, lk)
        cs = [a1, a2, b1, b2]
        for c in cs[1:]:
            c.start()
        time.sleep(1.5 * TTL / 1000.0)
        assert _leaders(cs) == [a1], [c.who for c in _leaders(cs)]
        # Kill right after a renewal so the keys have almost a full ttl
        # left. Each node's key expires no earlier than (time before its
        # PTTL was asked + PTTL); a quorum is free no earlier than the 3rd
        # smallest of those, so nobody may lead before that.
        conns = [Resp(nd.path) for nd in cluster.nodes]
        try:
            prev = None
            for _ in range(2000):
                p = conns[0].cmd("PTTL", key)
                if prev is not None and p > prev + 100:
                    break
                prev = p
                time.sleep(0.002)
            expiries, pttls = [], []
            for rc in conns:
                t_before = time.monotonic()
                p = rc.cmd("PTTL", key)
                pttls.append(p)
                if isinstance(p, int) and p > 0:
                    expiries.append(t_before + p / 1000.0)
        finally:
            for rc in conns:
                rc.close()
        da.proc.kill()
        t_kill = time.monotonic()
        da.proc.wait(timeout=5)
        assert len(expiries) >= 3, pttls
        earliest = sorted(expiries)[2]
        nxt, _ = _wait_leader([b1, b2], 5.0 * TTL / 1000.0)
        assert nxt is not None, "no leader on daemon B within 5 ttl"
        start = nxt.cur_start
        handover_ms = (start - t_kill) * 1000.0
        print("PTTLs just before kill -9: %r (a quorum free at +%.0f ms); %s "
              "took over %.0f ms after the kill (ttl %d)" % (
                  pttls, (earliest - t_kill) * 1000, nxt.who, handover_ms,
                  TTL))
        assert start >= earliest - 0.002, (
            "%s led %.0f ms before the old leader's keys expired on a "
            "quorum" % (nxt.who, (earliest - start) * 1000))
        assert handover_ms >= TTL * 0.8, handover_ms
        assert handover_ms < TTL * 3 * SLOW, handover_ms
        time.sleep(0.3)
        _stop_all(cs)
        with lk:
            all_terms = list(terms)
        print("terms:", _summary(all_terms))
        _assert_no_overlap(all_terms)
        assert [c for c in cs if c.leading.is_set()] == []
    finally:
        _stop_all(cs)
        da.kill()
