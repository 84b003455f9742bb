"""Long-held locks. renew (and renew_max_ms), the lost event,
FIFO waiters, the cross-daemon pub/sub wake, wait_ms bounds, done ends
waiting, --max-waiters, waiters of closed connections, fences across node
subsets, renew refused over HTTP."""

import select
import socket
import time

from extra import curl1, metric, scrape, wait_metric
from rl import (PREFIX, SLOW, Resp, assert_error, assert_ok, lock_key,
                poll_until, rname)


def _ms(s):
    return s * 1000.0


def _sample_key(cluster, key, seconds, interval=0.05):
    """[(t, [GET per node], [PTTL per node])] for `seconds`."""
    out = []
    t0 = time.monotonic()
    for _ in range(int(seconds / interval) + 50):
        t = time.monotonic() - t0
        if t >= seconds:
            break
        out.append((t, cluster.get_all(key), cluster.pttl_all(key)))
        time.sleep(interval)
    return out


# -- renew -------------------------------------------------------------------


def test_renew_keeps_lock_for_2s(cluster, daemon):
    res = rname("renew")
    key = lock_key(res)
    ttl = int(300 * SLOW)
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=ttl, renew=True)
        assert_ok(r, "renewing acquire")
        tok = r["lock"].encode()
        samples = _sample_key(cluster, key, 2.2 * SLOW)
        increases = 0
        prev = None
        for t, vals, pttls in samples:
            held = sum(1 for v in vals if v == tok)
            assert held >= 3, "at %.0f ms the token is on %d nodes: %r" % (
                _ms(t), held, vals)
            for p in pttls:
                assert isinstance(p, int) and 0 < p <= ttl, (
                    "at %.0f ms PTTL %r (ttl %d)" % (_ms(t), pttls, ttl))
            if prev is not None and pttls[0] > prev:
                increases += 1
            prev = pttls[0]
        print("renew: %d samples over %.1f s, token on all nodes; PTTL on n1 "
              "went up %d times" % (len(samples), samples[-1][0], increases))
        # 2.2 s of a 300 ms lock needs >= 6 refreshes; sampling at 50 ms
        # sees most of them.
        assert increases >= 3, "PTTL was not refreshed: %r" % [
            s[2][0] for s in samples]
        assert c.events == [], c.events
        assert_ok(c.call("release", lock=r["lock"]), "release renewed lock")
    assert cluster.get_all(key) == [None] * 5


def test_renew_max_ms_ends_renewal(cluster, daemon):
    res = rname("renewmax")
    key = lock_key(res)
    ttl = int(300 * SLOW)
    rmax = int(600 * SLOW)
    with daemon.client() as c:
        t0 = time.monotonic()
        r = c.call("acquire", resource=res, ttl_ms=ttl, renew=True,
                   renew_max_ms=rmax)
        assert_ok(r, "acquire with renew_max_ms")
        tok = r["lock"].encode()
        gone_at = None
        held_after_ttl = False
        for _ in range(1000):
            t = time.monotonic() - t0
            vals = cluster.get_all(key)
            n = sum(1 for v in vals if v == tok)
            if n >= 3 and t > (ttl + 100 * SLOW) / 1000.0:
                held_after_ttl = True
            if n == 0:
                gone_at = t
                break
            if t > 4.0 * SLOW:
                break
            time.sleep(0.01)
        print("renew_max_ms %d, ttl %d: key gone after %s ms; held past ttl: "
              "%s; events: %r" % (rmax, ttl, None if gone_at is None else
                                  "%.0f" % _ms(gone_at), held_after_ttl,
                                  c.events))
        assert held_after_ttl, "renewal did not keep the lock past its ttl"
        assert gone_at is not None, "still held after 4 s: renewal never " \
            "stopped (renew_max_ms %d)" % rmax
        # renewal stops at renew_max_ms; the key lives at most a ttl more.
        assert (rmax - 50) / 1000.0 <= gone_at <= \
            (rmax + ttl + 400 * SLOW) / 1000.0, gone_at
        # The connection is still usable.
        assert_ok(c.call("ping"))


def test_no_renew_expires_after_ttl(cluster, daemon):
    res = rname("norenew")
    key = lock_key(res)
    with daemon.client() as c:
        t0 = time.monotonic()
        r = c.call("acquire", resource=res, ttl_ms=300)
        assert_ok(r)
        tok = r["lock"].encode()
        assert cluster.get_all(key).count(tok) >= 3
        vals, secs = poll_until(
            lambda: all(v is None for v in cluster.get_all(key)), 2.0, 0.01)
        gone = time.monotonic() - t0
        print("300 ms lock without renew gone after %.0f ms" % _ms(gone))
        assert vals, "the key outlived its ttl: %r" % cluster.get_all(key)
        assert 0.2 <= gone <= 1.0 * SLOW, gone
        assert_error(c.call("release", lock=r["lock"]), "not_held")


# -- lost ----------------------------------------------------------------


def test_lost_event_before_validity_ends(cluster, daemon):
    res = rname("lost")
    key = lock_key(res)
    ttl = int(600 * SLOW)
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=ttl, renew=True)
        t_ok = time.monotonic()
        assert_ok(r)
        for nd in cluster.nodes[:3]:
            nd.pause()
        t_paused = time.monotonic()
        deadline = t_ok + r["validity_ms"] / 1000.0
        ev = c.wait_event(timeout=5.0 * SLOW)
        t_ev = time.monotonic()
        print("lost event %.0f ms after ok (paused at +%.0f ms), validity "
              "ended at +%d ms: %r" % (_ms(t_ev - t_ok), _ms(t_paused - t_ok),
                                       r["validity_ms"], ev))
        assert ev.get("event") == "lost", ev
        assert ev.get("lock") == r["lock"], ev
        assert ev.get("resource") == res, ev
        assert t_ev < deadline, (
            "lost arrived %.0f ms after the ok, but the validity (%d ms) "
            "had already ended" % (_ms(t_ev - t_ok), r["validity_ms"]))
        cluster.resume_all()
        vals, secs = poll_until(
            lambda: all(v is None for v in cluster.get_all(key)),
            3.0 * SLOW, 0.05)
        print("after SIGCONT the key was gone from every node in %.0f ms"
              % _ms(secs))
        assert vals, "key still there after SIGCONT: %r" % cluster.get_all(key)
        # The lost lock is not held any more.
        assert_error(c.call("release", lock=r["lock"]), "not_held")


# -- FIFO ----------------------------------------------------------------


def _first_readable(clients, timeout):
    """(index, msg) of the first client in `clients` that has a line."""
    deadline = time.monotonic() + timeout
    for _ in range(10000):
        for i, c in enumerate(clients):
            if b"\n" in c.buf:
                return i, c.read_msg(1.0)
        left = deadline - time.monotonic()
        if left <= 0:
            return None, None
        rd, _, _ = select.select([c.sock for c in clients], [], [], left)
        for i, c in enumerate(clients):
            if c.sock in rd:
                return i, c.read_msg(1.0)
    return None, None


def test_fifo_four_waiters(cluster, daemon):
    res = rname("fifo")
    key = lock_key(res)
    holder = daemon.client()
    waiters = [daemon.client(timeout=10.0) for _ in range(4)]
    try:
        r = holder.call("acquire", resource=res, ttl_ms=60000)
        assert_ok(r)
        for i, w in enumerate(waiters):
            w.send({"op": "acquire", "id": "w%d" % i, "resource": res,
                    "ttl_ms": 60000, "wait_ms": 30000})
            time.sleep(0.1)
        cur_client, cur_lock = holder, r["lock"]
        remaining = list(range(4))
        order, lat = [], []
        for step in range(4):
            t0 = time.monotonic()
            assert_ok(cur_client.call("release", lock=cur_lock))
            i, msg = _first_readable([waiters[k] for k in remaining],
                                     5.0 * SLOW)
            dt = time.monotonic() - t0
            assert i is not None, "no waiter got the lock within 5 s of " \
                "release %d" % step
            k = remaining.pop(i)
            order.append(k)
            lat.append(_ms(dt))
            assert_ok(msg, "waiter w%d" % k)
            assert msg.get("id") == "w%d" % k, msg
            vals = cluster.get_all(key)
            assert vals.count(msg["lock"].encode()) >= 3, vals
            cur_client, cur_lock = waiters[k], msg["lock"]
        print("FIFO order %r, handover latencies (ms): %s" % (
            order, ", ".join("%.1f" % x for x in lat)))
        assert order == [0, 1, 2, 3], "waiters served out of order: %r" % (
            order,)
        assert max(lat) < 1000.0 * SLOW, lat
        assert_ok(cur_client.call("release", lock=cur_lock))
    finally:
        holder.close()
        for w in waiters:
            w.close()


# -- cross-daemon wake ---------------------------------------------------


def test_cross_daemon_wake(cluster, daemon, daemon_factory):
    b = daemon_factory.start(cluster, name="b")
    res = rname("xwake")
    with daemon.client() as ca, b.client(timeout=15.0) as cb:
        r = ca.call("acquire", resource=res, ttl_ms=10000)
        assert_ok(r)
        cb.send({"op": "acquire", "id": "wb", "resource": res,
                 "ttl_ms": 10000, "wait_ms": 10000})
        time.sleep(0.5)
        t0 = time.monotonic()
        assert_ok(ca.call("release", lock=r["lock"]))
        t1 = time.monotonic()
        rb = cb.response("wb", timeout=12.0)
        t2 = time.monotonic()
        print("cross-daemon: B's waiter got the lock %.1f ms after A's "
              "release answered (%.1f ms after it was sent)"
              % (_ms(t2 - t1), _ms(t2 - t0)))
        assert_ok(rb, "B's waiter")
        assert t2 - t1 < 3.0, "B waited %.1f s: no wake-up, it waited for " \
            "the TTL or back-off" % (t2 - t1)
        assert_ok(cb.call("release", lock=rb["lock"]))


# -- wait_ms bounds ------------------------------------------------------


def test_wait_ms_bounds(cluster, daemon):
    res = rname("wbound")
    with daemon.client() as h, daemon.client() as w:
        assert_ok(h.call("acquire", resource=res, ttl_ms=30000))
        t0 = time.monotonic()
        r = w.call("acquire", resource=res, wait_ms=300, timeout=5.0)
        dt = time.monotonic() - t0
        print("wait_ms 300 answered %s after %.0f ms" % (r.get("error"),
                                                        _ms(dt)))
        assert_error(r, "busy")
        assert 0.25 <= dt < 2.0, dt
        t0 = time.monotonic()
        r = w.call("acquire", resource=res, wait_ms=0)
        dt = time.monotonic() - t0
        print("wait_ms 0 answered busy after %.1f ms" % _ms(dt))
        assert_error(r, "busy")
        assert dt < 0.25 * SLOW, dt


def test_waiting_ends_with_done(cluster, daemon):
    res = rname("wdone")
    with daemon.client() as h, daemon.client(timeout=15.0) as w:
        r = h.call("acquire", resource=res, ttl_ms=30000)
        assert_ok(r)
        w.send({"op": "acquire", "id": "wd", "resource": res,
                "wait_ms": 10000})
        time.sleep(0.3)
        t0 = time.monotonic()
        assert_ok(h.call("complete", lock=r["lock"], keep_ms=60000))
        rw = w.response("wd", timeout=12.0)
        dt = time.monotonic() - t0
        print("waiter answered %r %.1f ms after complete" % (
            rw.get("error", rw), _ms(dt)))
        assert_error(rw, "done")
        assert dt < 2.0, "done came after %.1f s: the waiter waited" % dt
        done = cluster.get_all(lock_key(res))
        assert done.count(b"done:" + r["lock"].encode()) >= 3, done


def test_too_many_waiters_limit(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="mw", extra=["--max-waiters", "2"])
    res = rname("mw")
    cs = [d.client(timeout=10.0) for _ in range(4)]
    try:
        assert_ok(cs[0].call("acquire", resource=res, ttl_ms=30000))
        for i in (1, 2):
            cs[i].send({"op": "acquire", "id": "w", "resource": res,
                        "wait_ms": 20000})
        _, secs = poll_until(
            lambda: metric(scrape(d.socket), "redlockd_waiters") == 2, 3.0)
        t0 = time.monotonic()
        r = cs[3].call("acquire", resource=res, wait_ms=20000, timeout=5.0)
        print("third waiter answered %r after %.1f ms" % (
            r.get("error"), _ms(time.monotonic() - t0)))
        assert_error(r, "limit")
        # A busy answer without waiting is not limited.
        assert_error(cs[3].call("acquire", resource=res), "busy")
    finally:
        for c in cs:
            c.close()


def test_closed_waiter_is_removed(cluster, daemon):
    res = rname("wclose")
    key = lock_key(res)
    with daemon.client() as h:
        r = h.call("acquire", resource=res, ttl_ms=30000)
        assert_ok(r)
        w = daemon.client()
        w.send({"op": "acquire", "id": "w", "resource": res,
                "wait_ms": 60000})
        v, secs = wait_metric(daemon.socket, "redlockd_waiters", 1)
        assert v == 1, "waiters gauge %r with one waiter" % v
        w.close()
        v, secs = wait_metric(daemon.socket, "redlockd_waiters", 0)
        print("waiters gauge back to 0 %.0f ms after the close" % _ms(secs))
        assert v == 0, "waiters gauge stays %r after its connection " \
            "closed" % v
        assert_ok(h.call("release", lock=r["lock"]))
    # Nobody took the lock on behalf of the gone waiter.
    time.sleep(0.3)
    assert cluster.get_all(key) == [None] * 5, cluster.get_all(key)
    assert metric(scrape(daemon.socket), "redlockd_locks_held") == 0


# -- fences --------------------------------------------------------------


def _fenced(c, res):
    r = c.call("acquire", resource=res, fence=True, ttl_ms=3000,
               wait_ms=8000, timeout=15.0)
    assert_ok(r, "fenced acquire")
    f = r.get("fence")
    assert isinstance(f, int) and not isinstance(f, bool), r
    assert_ok(c.call("release", lock=r["lock"]))
    return f


def test_fences_across_node_subsets(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="f",
                             extra=["--quarantine-ms", "200"])
    res = rname("fsub")
    pairs = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0), (0, 2), (1, 3),
             (2, 4)]
    fences = []
    with d.client(timeout=15.0) as c:
        fences.append(_fenced(c, res))
        for a, b in pairs:
            cluster.nodes[a].pause()
            cluster.nodes[b].pause()
            try:
                fences.append(_fenced(c, res))
            finally:
                cluster.nodes[a].resume()
                cluster.nodes[b].resume()
        print("fences with pairs paused %r: %r" % (pairs, fences))
        assert all(x < y for x, y in zip(fences, fences[1:])), fences

        # Push node 1's counter far ahead; pause nodes 4 and 5 so that
        # node 1 must be in the quorum.
        n1 = cluster.nodes[0]
        cur = int(n1.cmd("GET", PREFIX + "fence") or 0)
        pushed = max(cur, fences[-1]) + 1000000
        assert n1.cmd("SET", PREFIX + "fence", pushed) == "OK"
        cluster.nodes[3].pause()
        cluster.nodes[4].pause()
        try:
            f = _fenced(c, res)
        finally:
            cluster.nodes[3].resume()
            cluster.nodes[4].resume()
        print("node 1 counter pushed to %d; next fence %d" % (pushed, f))
        assert f > pushed, "fence %d does not exceed node 1's pushed " \
            "counter %d (node 1 was in the quorum)" % (f, pushed)
        later = [f]
        for a, b in [(0, 1), (0, 4), (1, 2)]:
            cluster.nodes[a].pause()
            cluster.nodes[b].pause()
            try:
                later.append(_fenced(c, res))
            finally:
                cluster.nodes[a].resume()
                cluster.nodes[b].resume()
        later.append(_fenced(c, res))
        print("later fences: %r" % later)
        assert all(x < y for x, y in zip(later, later[1:])), later


# -- HTTP ----------------------------------------------------------------


def test_http_renew_refused(daemon_mod):
    res = rname("hrenew")
    r = curl1(daemon_mod.socket, "-X", "POST", "http://localhost/v1/locks",
              "-H", "Content-Type: application/json",
              "-d", '{"resource":"%s","ttl_ms":1000,"renew":true}' % res)
    print("HTTP renew:true -> %d %r" % (r.status, r.body))
    assert r.status == 400, r
    body = r.json()
    assert_error(body, "bad_request")
    msg = body["error"]["message"].lower()
    assert "extend" in msg or "ndjson" in msg, body
    # nothing was taken
    r2 = curl1(daemon_mod.socket, "-X", "POST", "http://localhost/v1/locks",
               "-d", '{"resource":"%s","ttl_ms":1000}' % res)
    assert r2.status == 200, r2


# -- wake channel ----------------------------------------------------------


def _read_push(r, timeout):
    """The next pub/sub push on a subscribed Resp, or None."""
    r.sock.settimeout(timeout)
    try:
        return r._reply()
    except socket.timeout:
        return None
    finally:
        r.sock.settimeout(2.0)


def test_release_and_complete_publish_wake(cluster, daemon):
    res = rname("pub")
    chan = (PREFIX + "wake:" + res).encode()
    subs = []
    try:
        for nd in cluster.nodes:
            r = Resp(nd.path)
            subs.append(r)
            r.sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n"
                           % (len(chan), chan))
            ack = _read_push(r, 2.0)
            assert ack and ack[0] == b"subscribe", ack
        announced = set()
        with daemon.client() as c:
            # complete last: its done mark refuses later acquires.
            for op in ("release", "release", "release", "release",
                       "complete"):
                r = c.call("acquire", resource=res, ttl_ms=5000)
                assert_ok(r)
                assert_ok(c.call(op, lock=r["lock"]))
                got = [_read_push(s, 0.5) for s in subs]
                print("%s: wake messages per node: %r" % (op, got))
                with_msg = [k for k, g in enumerate(got)
                            if g and g[0] == b"message" and g[1] == chan]
                # n - quorum + 1 nodes announce: any n - quorum failing
                # still leave one, and no node pays for every PUBLISH.
                assert len(with_msg) == 3, (op, got)
                announced.update(with_msg)
        # The announcing nodes take turns.
        assert len(announced) > 3, announced
    finally:
        for s in subs:
            s.close()


def test_cross_daemon_wake_with_nodes_down(cluster, daemon, daemon_factory):
    """With n - quorum nodes down, some node still announces each release:
    a waiter on another daemon is woken, not left to its back-off."""
    b = daemon_factory.start(cluster, name="b")
    cluster.nodes[1].kill9()
    cluster.nodes[3].kill9()
    res = rname("xwake-down")
    with daemon.client() as ca, b.client(timeout=15.0) as cb:
        poll_until(lambda: sum(1 for n in ca.call("health")["nodes"]
                               if n["up"]) == 3, 5.0 * SLOW)
        poll_until(lambda: sum(1 for n in cb.call("health")["nodes"]
                               if n["up"]) == 3, 5.0 * SLOW)
        for k in range(4):
            r = ca.call("acquire", resource=res, ttl_ms=20000)
            assert_ok(r)
            cb.send({"op": "acquire", "id": "w%d" % k, "resource": res,
                     "ttl_ms": 20000, "wait_ms": 15000})
            time.sleep(0.3)
            assert_ok(ca.call("release", lock=r["lock"]))
            t1 = time.monotonic()
            rb = cb.response("w%d" % k, timeout=17.0)
            dt = time.monotonic() - t1
            print("round %d: B's waiter woke %.1f ms after the release"
                  % (k, _ms(dt)))
            assert_ok(rb, "B's waiter")
            assert dt < 3.0, "B waited %.1f s: no wake-up" % dt
            assert_ok(cb.call("release", lock=rb["lock"]))
