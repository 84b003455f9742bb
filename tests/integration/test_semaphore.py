"""Semaphores. "permits": N on acquire takes one of N slot locks
under <prefix>sem:; release, extend, renew, complete and wait work on a
permit; bad permits are bad_request (NDJSON and HTTP); and N = 3 with 12
contending clients over two daemons, under pauses and a node restart,
never has more than 3 holders, checked from the holders' side, and leaves
no slot key behind."""

import json
import random
import threading
import time

from extra import curl1
from rl import (PREFIX, SLOW, assert_error, assert_ok, lock_key, poll_until,
                rname)

U = "http://localhost"


def _sem_keys(cluster, res):
    return [k for keys in cluster.keys_all(PREFIX + "sem:*")
            if isinstance(keys, list) for k in keys if k.endswith(
                b":" + res.encode())]


def test_permits_basics(cluster_mod, daemon_mod):
    res = rname("sem")
    with daemon_mod.client() as a, daemon_mod.client() as b:
        got = [a.call("acquire", resource=res, permits=3, ttl_ms=20000)
               for _ in range(3)]
        for g in got:
            assert_ok(g)
            assert g["resource"] == res, g
        assert sorted(g["permit"] for g in got) == [0, 1, 2], got
        assert_error(a.call("acquire", resource=res, permits=3), "busy")
        # Slots live apart from the lock key: the resource's lock is free.
        assert cluster_mod.get_all(lock_key(res)) == [None] * 5
        keys = cluster_mod.keys_all(PREFIX + "sem:*")
        for k in range(3):
            key = ("%ssem:%d:%s" % (PREFIX, k, res)).encode()
            assert all(key in ks for ks in keys), keys
        plain = a.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(plain, "a lock of the same name is another thing")
        assert_ok(a.call("release", lock=plain["lock"]))
        # The listing shows the permits, not the slot names.
        ls = a.call("locks", prefix=res)
        assert sorted((e["resource"], e["permit"], e["permits"])
                      for e in ls["locks"]) == [(res, 0, 3), (res, 1, 3),
                                                (res, 2, 3)], ls
        # A waiter (FIFO for any permit) gets the first one let go.
        b.send({"op": "acquire", "id": "w", "resource": res, "permits": 3,
                "wait_ms": int(5000 * SLOW)})
        time.sleep(0.2)
        assert a.call("locks", prefix=res)["locks"][0]["waiters"] == 1
        assert_ok(a.call("release", lock=got[1]["lock"], resource=res))
        w = b.response("w", timeout=5 * SLOW)
        assert_ok(w, "the waiter")
        assert w["permit"] == got[1]["permit"], (w, got[1])
        # extend names the resource; the daemon knows the slot.
        e = a.call("extend", lock=got[0]["lock"], resource=res,
                   ttl_ms=30000)
        assert_ok(e)
        assert e["resource"] == res and e["permit"] == got[0]["permit"], e
        # Through the token alone, too.
        assert_ok(a.call("release", lock=got[0]["lock"]))
        assert_ok(b.call("release", lock=w["lock"], resource=res,
                         permit=w["permit"]))
        assert_ok(a.call("release", lock=got[2]["lock"], resource=res))
    poll_until(lambda: not _sem_keys(cluster_mod, res), 5 * SLOW,
               what="slot keys gone")


def test_busy_semaphore_says_all_permits_are_held(cluster_mod, daemon_mod):
    """A full semaphore is not "held by another owner": here the asker
    holds every permit itself. Said at once, after wait_ms, and to a
    waiter whose wait ran out in the queue; a lock's busy is unchanged."""
    res = rname("semfull")
    with daemon_mod.client() as a, daemon_mod.client() as b:
        got = [a.call("acquire", resource=res, permits=2, ttl_ms=20000)
               for _ in range(2)]
        for g in got:
            assert_ok(g)
        assert_error(a.call("acquire", resource=res, permits=2),
                     "busy", "all permits of the semaphore are held")
        assert_error(a.call("acquire", resource=res, permits=2,
                            wait_ms=200),
                     "busy", "all permits of the semaphore are held")
        # b heads the queue for longer; a's wait runs out behind it.
        b.send({"op": "acquire", "id": "head", "resource": res,
                "permits": 2, "wait_ms": int(3000 * SLOW)})
        poll_until(lambda: a.call("locks", prefix=res)["locks"][0]
                   ["waiters"] == 1, 5 * SLOW, what="b queued")
        r = a.call("acquire", resource=res, permits=2, wait_ms=300)
        assert_error(r, "busy", "all permits of the semaphore are held")
        assert "in the queue" in r["error"]["message"], r
        for g in got:
            assert_ok(a.call("release", lock=g["lock"]))
        assert_ok(b.response("head", timeout=5 * SLOW))
        plain = a.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(plain)
        assert_error(b.call("acquire", resource=res),
                     "busy", "held by another owner")
        assert_ok(a.call("release", lock=plain["lock"]))


def test_permit_release_through_another_daemon(cluster, daemon,
                                               daemon_factory):
    d2 = daemon_factory.start(cluster, name="d2")
    res = rname("semx")
    with daemon.client() as a, d2.client() as b:
        g = a.call("acquire", resource=res, permits=2, ttl_ms=20000)
        assert_ok(g)
        # Without "permit", another daemon cannot know the slot.
        assert_error(b.call("release", lock=g["lock"], resource=res),
                     "not_held")
        assert_ok(b.call("release", lock=g["lock"], resource=res,
                         permit=g["permit"]))
    assert not _sem_keys(cluster, res)


def test_permit_in_the_query_through_another_daemon(cluster, daemon,
                                                    daemon_factory):
    """Over HTTP the permit may ride in the query, as the resource does:
    curl -X DELETE '.../v1/locks/T?resource=r&permit=1', no body."""
    d2 = daemon_factory.start(cluster, name="d2")
    res = rname("semq")
    r = curl1(daemon.socket, "-X", "POST", U + "/v1/locks",
              "--data-binary", json.dumps({"resource": res, "permits": 2,
                                           "ttl_ms": 20000}))
    g = r.json()
    assert_ok(g)
    base = "%s/v1/locks/%s?resource=%s" % (U, g["lock"], res)
    r = curl1(d2.socket, "-X", "POST",
              base.replace("?", "/extend?") + "&permit=%d" % g["permit"])
    assert r.status == 200, r
    assert_ok(r.json())
    r = curl1(d2.socket, "-X", "DELETE", base + "&permit=%d" %
              ((g["permit"] + 1) % 2))
    assert r.status == 404, r
    assert_error(r.json(), "not_held")
    assert _sem_keys(cluster, res)
    r = curl1(d2.socket, "-X", "DELETE", base + "&permit=%d" % g["permit"])
    assert r.status == 200, r
    assert_ok(r.json())
    assert not _sem_keys(cluster, res)


def test_completed_permit_is_skipped_until_all_are(cluster_mod, daemon_mod):
    """A completed permit is one the semaphore lacks until its done mark
    expires. The answer used to hang on the slot a round started from (a
    random one): about half of these acquisitions of a semaphore of 2 with
    one permit completed answered done. Now they take the other permit; a
    full semaphore with a completed permit is busy (a waiter keeps
    waiting), and done comes only when every permit is completed."""
    res = rname("semdone")
    with daemon_mod.client() as a:
        first = a.call("acquire", resource=res, permits=2, ttl_ms=20000)
        assert_ok(first)
        assert_ok(a.call("complete", lock=first["lock"], keep_ms=60000))
        other = 1 - first["permit"]
        for _ in range(12):
            g = a.call("acquire", resource=res, permits=2, ttl_ms=20000)
            assert_ok(g)
            assert g["permit"] == other, (g, first)
            assert_ok(a.call("release", lock=g["lock"]))
        held = a.call("acquire", resource=res, permits=2, ttl_ms=20000)
        assert_ok(held)
        r = a.call("acquire", resource=res, permits=2)
        assert_error(r, "busy", "held or completed")
        # A waiter is not sent away by the completed permit: the release
        # of the held one lets it in.
        a.send({"op": "acquire", "id": "w", "resource": res, "permits": 2,
                "ttl_ms": 20000, "wait_ms": int(5000 * SLOW)})
        time.sleep(0.2)
        assert_ok(a.call("release", lock=held["lock"]))
        w = a.response("w", timeout=10 * SLOW)
        assert_ok(w)
        assert w["permit"] == other, w
        assert_ok(a.call("complete", lock=w["lock"], keep_ms=60000))
        for _ in range(3):
            assert_error(a.call("acquire", resource=res, permits=2,
                                wait_ms=100),
                         "done", "every permit of the semaphore")
        # A larger count sees the free slot beyond them.
        g = a.call("acquire", resource=res, permits=3, ttl_ms=20000)
        assert_ok(g)
        assert g["permit"] == 2, g
        assert_ok(a.call("release", lock=g["lock"]))


def test_waiter_backs_off_on_the_slot_that_frees_first(cluster_mod,
                                                       daemon_mod):
    """Permit 0 is held by a holder gone without a release (its key has
    about a second left), permit 1 for a minute. A waiter tries both each
    round, from a random one, and used to sleep on the PTTL of the last it
    tried: in about half of the rounds permit 1's, so it took permit 0 only
    at its last try, when wait_ms ran out, though it had stood free for
    seconds. It sleeps on the shortest now, whichever slot came last:
    several acquisitions cover both orders."""
    res = rname("semsoon")
    keys = [("%ssem:%d:%s" % (PREFIX, k, res)).encode() for k in range(2)]
    wait_s = 5.0 * SLOW
    with daemon_mod.client() as a:
        for trial in range(6):
            cluster_mod.each("SET", keys[0], "%032x" % (2 * trial + 1),
                             "PX", "1000")
            cluster_mod.each("SET", keys[1], "%032x" % (2 * trial + 2),
                             "PX", "60000")
            t0 = time.monotonic()
            g = a.call("acquire", resource=res, permits=2, ttl_ms=20000,
                       wait_ms=int(wait_s * 1000), timeout=wait_s + 5)
            took = time.monotonic() - t0
            assert_ok(g)
            assert g["permit"] == 0, g
            # granted near the stale slot's expiry, well before the wait
            # ran out (its last try)
            assert took < 0.6 * wait_s, (trial, took)
            assert_ok(a.call("release", lock=g["lock"]))
    cluster_mod.each("DEL", keys[1])


def test_permit_renew_session_complete(cluster_mod, daemon_mod):
    res = rname("semr")
    with daemon_mod.client() as a:
        g = a.call("acquire", resource=res, permits=2,
                   ttl_ms=int(300 * SLOW), renew=True, fence=True)
        assert_ok(g)
        assert isinstance(g["fence"], int), g
        time.sleep(1.0 * SLOW)
        key = ("%ssem:%d:%s" % (PREFIX, g["permit"], res)).encode()
        assert cluster_mod.get_all(key).count(g["lock"].encode()) >= 3
        assert a.events == [], a.events
        h = a.call("acquire", resource=res, permits=2, ttl_ms=20000)
        assert_ok(h)
        assert_ok(a.call("complete", lock=h["lock"], resource=res,
                         keep_ms=20000))
    # The session closed: its renewing permit is released.
    poll_until(lambda: cluster_mod.get_all(key) == [None] * 5, 5 * SLOW,
               what="session permit released")


def test_bad_permits(cluster_mod, daemon_mod):
    res = rname("semb")
    with daemon_mod.client() as c:
        for v in (0, 1, 1025, "3", 2.5, True, None):
            r = c.call("acquire", resource=res, permits=v)
            assert_error(r, "bad_request", "permits")
        for v in (-1, 1024, "0"):
            r = c.call("release", lock="a" * 32, resource=res, permit=v)
            assert_error(r, "bad_request", "permit")
        assert_ok(c.call("ping"))
    for body in ({"resource": res, "permits": 1},
                 {"resource": res, "permits": 2000}):
        r = curl1(daemon_mod.socket, "-X", "POST", U + "/v1/locks",
                  "--data-binary", json.dumps(body))
        assert r.status == 400, r
        assert r.json()["error"]["code"] == "bad_request", r
    r = curl1(daemon_mod.socket, "-X", "POST", U + "/v1/locks",
              "--data-binary", json.dumps({"resource": res, "permits": 2}))
    assert r.status == 200 and r.json()["permit"] in (0, 1), r
    tok = r.json()["lock"]
    r = curl1(daemon_mod.socket, "-X", "DELETE",
              U + "/v1/locks/%s?resource=%s" % (tok, res))
    assert r.status == 200, r


def test_mismatched_permits_logged_once(cluster_mod, daemon_mod):
    res = rname("semm")
    with daemon_mod.client() as c:
        toks = []
        for n in (2, 3, 3, 2, 4):
            r = c.call("acquire", resource=res, permits=n, ttl_ms=20000)
            if r.get("ok"):
                toks.append(r["lock"])
        for t in toks:
            c.call("release", lock=t, resource=res)
    text = daemon_mod.stderr_text()
    assert text.count("semaphore '%s'" % res) == 1, text[-2000:]


def test_three_permits_twelve_clients_two_daemons(cluster, daemon,
                                                  daemon_factory):
    """Never more than 3 holders, from the holders' side: each records
    [answer received, release sent], cut at the validity the daemon gave,
    on one monotonic clock; pauses and a node restart meanwhile."""
    d2 = daemon_factory.start(cluster, name="d2")
    res = rname("sem12")
    n_permits = 3
    intervals = []
    lock = threading.Lock()
    stop = threading.Event()
    errors = []

    def worker(d, seed):
        rnd = random.Random(seed)
        try:
            with d.client(timeout=20 * SLOW) as c:
                while not stop.is_set():
                    t_send = time.monotonic()
                    r = c.call("acquire", resource=res, permits=n_permits,
                               ttl_ms=int(1000 * SLOW),
                               wait_ms=int(1500 * SLOW))
                    t_got = time.monotonic()
                    if not r.get("ok"):
                        if r["error"]["code"] not in ("busy", "no_quorum"):
                            errors.append(r)
                        continue
                    time.sleep(rnd.uniform(0.01, 0.05))
                    t_end = min(time.monotonic(),
                                t_send + r["validity_ms"] / 1000.0)
                    with lock:
                        intervals.append((t_got, t_end, r["permit"]))
                    c.call("release", lock=r["lock"], resource=res)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(d, i))
               for i, d in enumerate([daemon, d2] * 6)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0 * SLOW)
        cluster.nodes[0].pause()
        time.sleep(0.5 * SLOW)
        cluster.nodes[0].resume()
        time.sleep(0.5 * SLOW)
        cluster.nodes[3].restart()
        time.sleep(1.0 * SLOW)
        cluster.nodes[1].pause()
        cluster.nodes[2].pause()
        time.sleep(0.4 * SLOW)  # no quorum for a moment
        cluster.nodes[1].resume()
        cluster.nodes[2].resume()
        time.sleep(1.0 * SLOW)
    finally:
        stop.set()
        for t in threads:
            t.join(30 * SLOW)
    assert not errors, errors[:5]
    assert len(intervals) >= 20, len(intervals)
    # Sweep: +1 at each start, -1 at each end (ends first on a tie).
    events = sorted([(s, 1) for s, e, _ in intervals if e > s] +
                    [(e, -1) for s, e, _ in intervals if e > s],
                    key=lambda x: (x[0], x[1]))
    held = most = 0
    for _, d in events:
        held += d
        most = max(most, held)
    print("%d holds, at most %d at once, permits used %s"
          % (len(intervals), most, sorted({p for _, _, p in intervals})))
    assert most <= n_permits, most
    assert most >= 2, "the test never had two holders at once"
    poll_until(lambda: not _sem_keys(cluster, res), 5 * SLOW,
               what="no slot key left behind")


def test_cross_daemon_wake_on_any_permit(cluster, daemon, daemon_factory):
    """B waits for a permit of a full semaphore; A lets go of one slot: B's
    waiter is woken by the semaphore's one channel (as test_long_held's
    cross-daemon wake, for a lock), not by its TTL or back-off."""
    b = daemon_factory.start(cluster, name="b")
    res = rname("semwake")
    with daemon.client() as ca, b.client(timeout=15.0) as cb:
        held = [ca.call("acquire", resource=res, permits=2, ttl_ms=10000)
                for _ in range(2)]
        for h in held:
            assert_ok(h)
        cb.send({"op": "acquire", "id": "wb", "resource": res, "permits": 2,
                 "ttl_ms": 10000, "wait_ms": 10000})
        time.sleep(0.5)
        gone = held[1]
        assert_ok(ca.call("release", lock=gone["lock"], resource=res))
        t1 = time.monotonic()
        rb = cb.response("wb", timeout=12.0)
        t2 = time.monotonic()
        assert_ok(rb, "B's waiter")
        assert rb["permit"] == gone["permit"], (rb, gone)
        assert t2 - t1 < 3.0, "B waited %.1f s: no wake-up" % (t2 - t1)
        assert_ok(cb.call("release", lock=rb["lock"], resource=res))
        assert_ok(ca.call("release", lock=held[0]["lock"], resource=res))
