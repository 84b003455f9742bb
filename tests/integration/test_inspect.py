"""Who holds what. The locks listing (NDJSON and HTTP: fields,
owner, waiters, prefix, limit and cursor, never a token, bounded under 100k
held locks), inspect of one resource by the quorum rules of release (free,
held, done, mine, fence; a paused minority still answers, a paused majority
is no_quorum), and the redlockd_wait_seconds histogram."""

import json
import os
import threading
import time
import urllib.parse

from extra import curl1, metric, scrape
from rl import (PREFIX, SANITIZED, SLOW, TOKEN_RE, assert_error, assert_ok,
                lock_key, poll_until, pytest, rname)

U = "http://localhost"


def _get(sock, path):
    return curl1(sock, U + path)


def _no_token(raw, *tokens):
    """A token is a capability: it never appears in a listing or an
    inspection, nor does anything shaped like one."""
    text = raw if isinstance(raw, str) else json.dumps(raw)
    for t in tokens:
        assert t not in text, text
    for word in text.replace('"', " ").replace(",", " ").split():
        assert not TOKEN_RE.match(word.strip("{}[]:")), text


def _walk(c, **fields):
    """Every page of the listing: (entries, pages)."""
    out, pages, cursor = [], 0, None
    for _ in range(100000):
        args = dict(fields)
        if cursor is not None:
            args["cursor"] = cursor
        r = c.call("locks", **args)
        assert_ok(r, "locks page")
        pages += 1
        assert r["count"] == len(r["locks"]), r
        out += r["locks"]
        cursor = r.get("next")
        if cursor is None:
            return out, pages
    raise AssertionError("the listing never ended")


# -- the listing --------------------------------------------------------------


def test_locks_listing_fields_owner_waiters(cluster_mod, daemon_mod):
    tag = rname("ls")
    sock = daemon_mod.socket
    with daemon_mod.client() as a, daemon_mod.client() as b:
        r1 = a.call("acquire", resource=tag + ":one", ttl_ms=20000,
                    fence=True)
        r2 = a.call("acquire", resource=tag + ":two", ttl_ms=20000,
                    renew=True)
        assert_ok(r1)
        assert_ok(r2)
        h = curl1(sock, "-X", "POST", U + "/v1/locks", "--data-binary",
                  json.dumps({"resource": tag + ":http", "ttl_ms": 20000}))
        assert h.status == 200, h
        htok = h.json()["lock"]
        # b waits for the first resource: one waiter.
        b.send({"op": "acquire", "id": "w", "resource": tag + ":one",
                "wait_ms": int(5000 * SLOW), "ttl_ms": 1000})
        time.sleep(0.3)
        r = a.call("locks", prefix=tag + ":")
        assert_ok(r, "locks")
        _no_token(r, r1["lock"], r2["lock"], htok)
        by = {e["resource"]: e for e in r["locks"]}
        assert set(by) == {tag + ":one", tag + ":two", tag + ":http"}, r
        assert r["count"] == 3 and r["total"] >= 3 and "next" not in r, r
        one, two, http = by[tag + ":one"], by[tag + ":two"], by[tag + ":http"]
        assert one["ttl_ms"] == 20000 and 0 < one["validity_ms"] <= 20000
        assert one["fence"] == r1["fence"] and one["renew"] is False, one
        assert two["renew"] is True and two["fence"] is None, two
        assert one["owner"]["pid"] == os.getpid(), one
        assert one["owner"]["uid"] == os.getuid(), one
        assert one["owner"]["gid"] == os.getgid(), one
        assert one["owner"] == two["owner"], (one, two)
        assert http["owner"] == "http", http
        assert one["waiters"] == 1 and two["waiters"] == 0, r
        now_ms = time.time() * 1000
        assert abs(one["since_ms"] - now_ms) < 60000, one
        assert one["held_ms"] >= 0, one
        # The order is the order of acquisition.
        assert [e["resource"] for e in r["locks"]] == [
            tag + ":one", tag + ":two", tag + ":http"], r
        # HTTP lists the same, with the query for the fields.
        q = urllib.parse.quote(tag + ":", safe="")
        g = _get(sock, "/v1/locks?prefix=%s&limit=2" % q)
        assert g.status == 200, g
        gb = g.json()
        _no_token(g.body.decode(), r1["lock"], r2["lock"], htok)
        assert [e["resource"] for e in gb["locks"]] == [
            tag + ":one", tag + ":two"], gb
        g2 = _get(sock, "/v1/locks?prefix=%s&limit=2&cursor=%s"
                  % (q, gb["next"]))
        assert [e["resource"] for e in g2.json()["locks"]] == [
            tag + ":http"], g2
        assert_ok(a.call("release", lock=r1["lock"]))
        w = b.response("w", timeout=5 * SLOW)
        assert_ok(w, "the waiter got it")
        assert_ok(b.call("release", lock=w["lock"]))
        assert_ok(a.call("release", lock=r2["lock"]))
    d = curl1(sock, "-X", "DELETE", U + "/v1/locks/" + htok)
    assert d.status == 200, d


def test_locks_pages_cover_each_once(cluster_mod, daemon_mod):
    tag = rname("pg")
    with daemon_mod.client() as c:
        objs = [{"op": "acquire", "id": i, "resource": "%s:%03d" % (tag, i),
                 "ttl_ms": 30000} for i in range(250)]
        answers, _ = c.pipeline(objs, timeout=30 * SLOW)
        toks = [answers[c.key(i)][0]["lock"] for i in range(250)]
        # Some go away between pages: the rest still come once each.
        for i in range(0, 250, 7):
            assert_ok(c.call("release", lock=toks[i]))
        entries, pages = _walk(c, prefix=tag + ":", limit=16)
        names = [e["resource"] for e in entries]
        want = ["%s:%03d" % (tag, i) for i in range(250) if i % 7]
        assert names == want, (len(names), len(want))
        assert pages >= len(want) // 16, pages
        # A walk with removals during it: what stays is seen exactly once.
        seen = []
        r = c.call("locks", prefix=tag + ":", limit=50)
        seen += [e["resource"] for e in r["locks"]]
        for i in range(1, 250, 7):
            c.call("release", lock=toks[i])
        rest, _ = _walk(c, prefix=tag + ":", limit=50, cursor=r["next"])
        seen += [e["resource"] for e in rest]
        assert len(seen) == len(set(seen)), seen
        kept = ["%s:%03d" % (tag, i) for i in range(250)
                if i % 7 not in (0, 1)]
        assert set(kept) <= set(seen), set(kept) - set(seen)


def test_locks_bad_fields(cluster_mod, daemon_mod):
    sock = daemon_mod.socket
    with daemon_mod.client() as c:
        assert_error(c.call("locks", limit=0), "bad_request", "limit")
        assert_error(c.call("locks", limit=1001), "bad_request", "limit")
        assert_error(c.call("locks", cursor="XYZ"), "bad_request", "cursor")
        assert_error(c.call("inspect"), "bad_request", "resource")
        assert_ok(c.call("ping"), "the connection goes on")
    for q in ("limit=0", "limit=abc", "cursor=0", "bogus=1", "fence=true"):
        g = _get(sock, "/v1/locks?" + q)
        assert g.status == 400, (q, g)
        assert g.json()["error"]["code"] == "bad_request", g
    g = _get(sock, "/v1/locks/x?limit=3")
    assert g.status == 400, g


@pytest.mark.skipif(SANITIZED, reason="100k acquisitions take too long under "
                    "ASan or valgrind; the pages' code runs there in the "
                    "smaller listing tests")
def test_locks_listing_bounded_under_100k(cluster, daemon_factory):
    """100k held locks: a page is at most `limit` entries, a prefix that
    matches nothing answers at once with a cursor to go on from, and the
    daemon keeps answering pings in between."""
    d = daemon_factory.start(cluster, name="big",
                             extra=("--node-timeout-ms", "2000"))
    n = 100000
    with d.client(timeout=60 * SLOW) as c, d.client() as p:
        t0 = time.monotonic()
        todo = list(range(n))
        for _ in range(5):
            failed = []
            for base in range(0, len(todo), 1000):
                objs = [{"op": "acquire", "id": i, "resource": "big:%06d" % i,
                         "ttl_ms": 600000} for i in todo[base:base + 1000]]
                answers, _ = c.pipeline(objs, timeout=120 * SLOW)
                failed += [o["id"] for o in objs
                           if not answers[c.key(o["id"])][0]["ok"]]
            todo = failed
            if not todo:
                break
        assert not todo, "%d acquisitions kept failing" % len(todo)
        print("100k locks taken in %.1f s" % (time.monotonic() - t0))
        r = p.call("locks", limit=1000, timeout=10 * SLOW)
        assert_ok(r)
        assert r["count"] == 1000 and r["total"] == n and "next" in r, \
            {k: v for k, v in r.items() if k != "locks"}
        # A prefix that matches nothing: bounded work per page, so more
        # than one page, each empty, and the walk ends.
        pages, cursor, t_max = 0, None, 0.0
        for _ in range(1000):
            args = {"prefix": "none:"}
            if cursor:
                args["cursor"] = cursor
            t1 = time.monotonic()
            r = p.call("locks", timeout=10 * SLOW, **args)
            t_max = max(t_max, time.monotonic() - t1)
            assert_ok(r)
            assert r["locks"] == [], r
            pages += 1
            cursor = r.get("next")
            if cursor is None:
                break
            assert_ok(p.call("ping"))
        assert cursor is None and pages >= 2, pages
        print("empty prefix walk over 100k: %d pages, slowest %.1f ms"
              % (pages, t_max * 1000))
        # Every lock once, by pages of 1000.
        entries, pages = _walk(p, limit=1000)
        assert len(entries) == n, (len(entries), pages)
        assert len({e["resource"] for e in entries}) == n
    # The session's 100k releases drain before the fixture stops the daemon
    # (which must exit within 5 s).
    poll_until(lambda: all(nd.cmd("DBSIZE") <= 1 for nd in cluster.nodes),
               180 * SLOW, interval=0.5, what="the 100k keys released")


# -- inspect ------------------------------------------------------------------


def test_inspect_states(cluster_mod, daemon_mod):
    res = rname("insp")
    sock = daemon_mod.socket
    with daemon_mod.client() as c, daemon_mod.client() as other:
        r = c.call("inspect", resource=res)
        assert_ok(r)
        assert r["state"] == "free" and r["agree"] == 5 and \
            r["answered"] == 5 and r["nodes"] == 5, r
        assert "pttl_ms" not in r and r["mine"] is False, r
        a = c.call("acquire", resource=res, ttl_ms=20000, fence=True)
        assert_ok(a)
        r = other.call("inspect", resource=res, fence=True)
        assert_ok(r)
        _no_token(r, a["lock"])
        assert r["state"] == "held" and r["agree"] == 5, r
        assert 0 < r["pttl_ms"] <= 20000 and r["mine"] is True, r
        assert r["fence"] >= a["fence"], r
        assert r["resource"] == res and r["waiters"] == 0, r
        # HTTP, with a resource that needs escaping in the path.
        g = _get(sock, "/v1/locks/%s?fence=true"
                 % urllib.parse.quote(res, safe=""))
        assert g.status == 200, g
        _no_token(g.body.decode(), a["lock"])
        assert g.json()["state"] == "held", g
        assert_ok(c.call("complete", lock=a["lock"], keep_ms=20000))
        r = c.call("inspect", resource=res)
        assert r["state"] == "done" and 0 < r["pttl_ms"] <= 20000, r
        assert r["mine"] is False, r
    # A lock held through another daemon is held, not mine.
    res2 = rname("insp2")
    for n in cluster_mod.nodes:
        n.cmd("SET", "redlock:lock:" + res2, "f" * 32, "PX", "20000")
    with daemon_mod.client() as c:
        r = c.call("inspect", resource=res2)
        assert r["state"] == "held" and r["mine"] is False, r
    for n in cluster_mod.nodes:
        n.cmd("DEL", "redlock:lock:" + res2)


def test_inspect_paused_minority_and_majority(cluster, daemon):
    res = rname("pause")
    sock = daemon.socket
    with daemon.client(timeout=10 * SLOW) as c:
        a = c.call("acquire", resource=res, ttl_ms=int(30000 * SLOW))
        assert_ok(a)
        cluster.nodes[0].pause()
        cluster.nodes[1].pause()
        r = c.call("inspect", resource=res)
        assert_ok(r, "a paused minority")
        assert r["state"] == "held" and r["agree"] == 3, r
        assert r["answered"] == 3 and r["mine"] is True, r
        cluster.nodes[2].pause()
        r = c.call("inspect", resource=res)
        assert_error(r, "no_quorum")
        g = _get(sock, "/v1/locks/" + urllib.parse.quote(res, safe=""))
        assert g.status == 503, g
        assert g.json()["error"]["code"] == "no_quorum", g
        _no_token(g.body.decode(), a["lock"])
        cluster.resume_all()
        time.sleep(0.5 * SLOW)
        r = c.call("inspect", resource=res)
        assert_ok(r, "after resuming")
        assert r["state"] == "held", r
        assert_ok(c.call("release", lock=a["lock"]))
        r = c.call("inspect", resource=res)
        assert r["state"] == "free", r


# -- wait time ----------------------------------------------------------------


def _oom(nodes, on):
    for nd in nodes:
        nd.cmd("CONFIG", "SET", "maxmemory", "1" if on else "0")


def test_inspect_fence_is_below_the_next_grant(cluster, daemon):
    """inspect's fence used to be the largest counter read, which a
    minority can run ahead of: with nodes 1-3 refusing writes, five fenced
    acquisitions of x fail and leave counter 5 on nodes 4-5 only. That
    inspect said 5, and then a fenced acquisition of y won on nodes 1-3
    answered 1. The fence inspect reports is one every next fenced
    acquisition answers more than, whichever quorum wins it."""
    fkey = PREFIX + "fence"
    x = rname("x")
    with daemon.client() as c:
        _oom(cluster.nodes[:3], True)
        try:
            for _ in range(5):
                assert_error(c.call("acquire", resource=x,
                                    ttl_ms=5000, fence=True), "no_quorum")
        finally:
            _oom(cluster.nodes[:3], False)
        assert cluster.get_all(fkey) == [None] * 3 + [b"5"] * 2
        r = c.call("inspect", resource=x, fence=True)
        assert_ok(r)
        assert r["answered"] == 5, r
        _oom(cluster.nodes[3:], True)
        try:
            y = c.call("acquire", resource=rname("y"), ttl_ms=5000,
                       fence=True)
        finally:
            _oom(cluster.nodes[3:], False)
        assert_ok(y)
        assert y["fence"] == 1, y
        assert y["fence"] > r["fence"], (r, y)
        # All nodes read, it is also at least every fence answered.
        r2 = c.call("inspect", resource=x, fence=True)
        assert_ok(r2)
        assert r2["fence"] >= y["fence"], (r2, y)
        z = c.call("acquire", resource=rname("z"), ttl_ms=5000, fence=True)
        assert_ok(z)
        assert z["fence"] > r2["fence"], (r2, z)


def test_inspect_names_a_node_that_refused(cluster_mod, daemon_mod):
    """A node that answers inspect with an error (the lock key holds a
    list: GET refuses it) is no state; when no state has enough nodes the
    answer says what the node said, not only that it did not count."""
    res = rname("inspwt")
    key = lock_key(res)
    for nd in cluster_mod.nodes[:3]:
        nd.cmd("RPUSH", key, "not a lock")
    try:
        with daemon_mod.client() as c:
            r = c.call("inspect", resource=res)
            assert_error(r, "no_quorum")
            msg = r["error"]["message"]
            print("answer: %s" % msg)
            assert "(2 answered, at most 2 agreed; node 1 refused: " \
                "WRONGTYPE" in msg, r
            assert len(msg) <= 256, r
    finally:
        for nd in cluster_mod.nodes[:3]:
            nd.cmd("DEL", key)


def test_wait_seconds_histogram(cluster_mod, daemon_mod):
    res = rname("waith")
    sock = daemon_mod.socket
    before = scrape(sock)
    c0 = metric(before, "redlockd_wait_seconds_count") or 0
    s0 = metric(before, "redlockd_wait_seconds_sum") or 0
    with daemon_mod.client() as a, daemon_mod.client() as b:
        h = a.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(h)
        b.send({"op": "acquire", "id": "w", "resource": res,
                "wait_ms": int(10000 * SLOW)})
        time.sleep(0.2)
        mid = scrape(sock)
        assert (metric(mid, "redlockd_waiters") or 0) >= 1, mid
        time.sleep(0.4)
        assert_ok(a.call("release", lock=h["lock"]))
        w = b.response("w", timeout=5 * SLOW)
        assert_ok(w)
        assert_ok(b.call("release", lock=w["lock"]))
    after = scrape(sock)
    assert metric(after, "redlockd_wait_seconds_count") == c0 + 1, after
    waited = metric(after, "redlockd_wait_seconds_sum") - s0
    assert 0.5 <= waited < 10 * SLOW, waited
    # An acquire that never waited is not observed.
    with daemon_mod.client() as a:
        h = a.call("acquire", resource=rname("nowait"), ttl_ms=1000)
        assert_ok(h)
        assert_ok(a.call("release", lock=h["lock"]))
    assert metric(scrape(sock), "redlockd_wait_seconds_count") == c0 + 1
    assert metric(after, "redlockd_wait_seconds_bucket", le="+Inf") == \
        c0 + 1


def test_inspect_concurrent_with_traffic(cluster_mod, daemon_mod):
    """Inspections in flight while the same resource is taken and let go:
    every answer is a state (no crash, no token)."""
    res = rname("busy")
    stop = threading.Event()
    errors = []

    def churn():
        with daemon_mod.client() as c:
            while not stop.is_set():
                r = c.call("acquire", resource=res, ttl_ms=1000,
                           wait_ms=200)
                if r.get("ok"):
                    c.call("release", lock=r["lock"])

    t = threading.Thread(target=churn)
    t.start()
    try:
        with daemon_mod.client() as c:
            states = set()
            for _ in range(100):
                r = c.call("inspect", resource=res)
                if not r.get("ok"):
                    # mid-release, no state may have enough nodes
                    if r["error"]["code"] != "no_quorum":
                        errors.append(r)
                    continue
                _no_token(r)
                states.add(r["state"])
            assert states <= {"free", "held"}, states
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors
