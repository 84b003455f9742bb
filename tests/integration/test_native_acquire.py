"""Acquire as one `SET key token NX PX ttl GET` per node
on Redis >= 7.0 (MULTI with INCR when fenced), the acquire script on older
servers. Every test runs both paths: "native" (the default on the Redis
7 the suite starts) and "script" (--acquire-script, the older-server
path), and checks which one ran from the nodes' INFO commandstats."""

import re
import threading
import time

from rl import (PREFIX, TOKEN_RE, assert_error, assert_ok, lock_key,
                need_acl_channels, need_redis, poll_until, pytest, rname)

PATHS = {"native": (), "script": ("--acquire-script",)}


@pytest.fixture(params=sorted(PATHS))
def path_daemon(request, cluster, daemon_factory):
    if request.param == "native":
        _need_native(cluster)
    d = daemon_factory.start(cluster, name="d-" + request.param,
                             extra=PATHS[request.param])
    return request.param, d


def _need_native(cluster):
    """Before 7.0, SET has no GET option and every acquire takes the
    script: the native path is not there to check."""
    need_redis(cluster.nodes, (7, 0), "the native acquire (SET NX GET)")


def _stats(cluster):
    """Command calls summed over every node, by command name."""
    calls = {}
    for info in cluster.each("INFO", "commandstats"):
        text = info.decode() if isinstance(info, bytes) else str(info)
        for name, n in re.findall(r"cmdstat_([^:]+):calls=(\d+)", text):
            calls[name] = calls.get(name, 0) + int(n)
    return calls


def _reset(cluster):
    cluster.each("CONFIG", "RESETSTAT")


def _assert_path(path, calls, n_acquires):
    """The acquisitions went the path asked for: a SET per node and no
    script per node on the native path (an EVALSHA there is a rollback of
    a node that had not answered when the round was lost), EVALSHA on the
    script path."""
    if path == "native":
        assert calls.get("set", 0) >= 5 * n_acquires, calls
        assert calls.get("evalsha", 0) < 5 * n_acquires, calls
    else:
        assert calls.get("evalsha", 0) >= 5 * n_acquires, calls


def test_won_busy_and_path(cluster, path_daemon):
    path, d = path_daemon
    res, key = rname("nat"), None
    key = lock_key(res)
    _reset(cluster)
    with d.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(r, "acquire")
        assert TOKEN_RE.match(r["lock"]), r
        assert 0 < r["validity_ms"] <= 20000, r
        assert "fence" not in r, r
        assert cluster.get_all(key) == [r["lock"].encode()] * 5
        for p in cluster.pttl_all(key):
            assert 15000 < p <= 20000, cluster.pttl_all(key)
        _assert_path(path, _stats(cluster), 1)
        # busy: the holder's key is untouched, and a request that does not
        # wait asks no PTTL
        _reset(cluster)
        with d.client() as c2:
            assert_error(c2.call("acquire", resource=res), "busy")
        assert cluster.get_all(key) == [r["lock"].encode()] * 5
        calls = _stats(cluster)
        _assert_path(path, calls, 1)
        if path == "native":
            assert calls.get("pttl", 0) == 0, calls
        assert_ok(c.call("release", lock=r["lock"]))
        assert cluster.get_all(key) == [None] * 5


def test_done_mark(cluster, path_daemon):
    path, d = path_daemon
    res = rname("natdone")
    with d.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
        assert_ok(c.call("complete", lock=tok, keep_ms=60000))
        _reset(cluster)
        # waiting stops at a done mark, at once
        t0 = time.monotonic()
        assert_error(c.call("acquire", resource=res, wait_ms=5000), "done")
        assert time.monotonic() - t0 < 4.0
        _assert_path(path, _stats(cluster), 1)
        assert cluster.get_all(lock_key(res)) == [
            b"done:" + tok.encode()] * 5


def test_partial_lock_rolled_back(cluster, path_daemon):
    """Three nodes hold another token: the acquisition is busy and what it
    set on the two free nodes is removed again."""
    path, d = path_daemon
    res = rname("natrb")
    key = lock_key(res)
    other = "f" * 32
    for nd in cluster.nodes[:3]:
        nd.cmd("SET", key, other, "PX", 30000)
    with d.client() as c:
        assert_error(c.call("acquire", resource=res, ttl_ms=20000), "busy")
    poll_until(lambda: cluster.get_all(key) == [other.encode()] * 3 +
               [None] * 2, 3.0, what="rollback on the free nodes")
    # a done mark on a minority with a holder elsewhere is busy, not done
    cluster.nodes[3].cmd("SET", key, "done:" + other, "PX", 30000)
    with d.client() as c:
        assert_error(c.call("acquire", resource=res), "busy")
    poll_until(lambda: cluster.get_all(key)[4] is None, 3.0,
               what="rollback on the free node")


def test_done_on_more_than_a_minority(cluster, path_daemon):
    """Done marks on 3 of 5 nodes prove done; the key set on the other
    two is rolled back."""
    path, d = path_daemon
    res = rname("natdm")
    key = lock_key(res)
    mark = "done:" + "e" * 32
    for nd in cluster.nodes[:3]:
        nd.cmd("SET", key, mark, "PX", 30000)
    with d.client() as c:
        assert_error(c.call("acquire", resource=res), "done")
    poll_until(lambda: cluster.get_all(key) == [mark.encode()] * 3 +
               [None] * 2, 3.0, what="rollback on the unmarked nodes")


def test_fence_increases(cluster, path_daemon):
    path, d = path_daemon
    res = rname("natf")
    key = lock_key(res)
    fences = []
    _reset(cluster)
    with d.client() as c:
        for _ in range(4):
            r = c.call("acquire", resource=res, ttl_ms=10000, fence=True)
            assert_ok(r, "fenced acquire")
            assert isinstance(r.get("fence"), int), r
            fences.append(r["fence"])
            # busy while held, fenced too: the holder keeps its key
            with d.client() as c2:
                assert_error(c2.call("acquire", resource=res, fence=True),
                             "busy")
            assert cluster.get_all(key) == [r["lock"].encode()] * 5
            assert_ok(c.call("release", lock=r["lock"]))
    assert fences == sorted(set(fences)), fences
    calls = _stats(cluster)
    if path == "native":
        assert calls.get("exec", 0) >= 5 * 8, calls
        assert calls.get("incr", 0) >= 5 * 8, calls
    else:
        assert calls.get("exec", 0) == 0, calls
    # every node's counter covers the fence answered last
    for v in cluster.each("GET", PREFIX + "fence"):
        assert int(v) >= fences[-1] - 4, v


def test_waiter_backs_off_on_pttl(cluster, path_daemon):
    """A waiter behind a holder in another daemon retries after the
    holder's PTTL, which the native path asks with a second command, and
    only then: a few SETs per node, not a poll every few ms."""
    path, d = path_daemon
    res = rname("natw")
    key = lock_key(res)
    for nd in cluster.nodes:
        nd.cmd("SET", key, "c" * 32, "PX", 1500)
    _reset(cluster)
    with d.client() as c:
        t0 = time.monotonic()
        r = c.call("acquire", resource=res, ttl_ms=5000, wait_ms=8000,
                   timeout=10)
        assert_ok(r, "acquire after the holder expired")
        assert time.monotonic() - t0 >= 1.0
        assert_ok(c.call("release", lock=r["lock"]))
    calls = _stats(cluster)
    if path == "native":
        assert calls.get("pttl", 0) >= 3, calls
        attempts = calls.get("set", 0) / 5
    else:
        # each busy attempt's script reads the PTTL; the last one won
        attempts = calls.get("pttl", 0) / 5 + 1
    # the plain back-off (5 ms doubling to 500 ms) would take 8 or more
    assert attempts <= 5, calls


def test_many_clients_one_resource(cluster, path_daemon):
    """Clients race for one resource through the daemon: at most one holds
    it at a time, and every node ends empty."""
    path, d = path_daemon
    res = rname("natrace")
    holders = []
    errors = []
    lock = threading.Lock()
    held = [0]

    def worker():
        try:
            with d.client() as c:
                for _ in range(15):
                    r = c.call("acquire", resource=res, ttl_ms=5000,
                               wait_ms=3000, fence=True, timeout=10)
                    if r.get("ok") is not True:
                        continue
                    with lock:
                        held[0] += 1
                        assert held[0] == 1, "two holders at once"
                        holders.append(r["fence"])
                    with lock:
                        held[0] -= 1
                    assert_ok(c.call("release", lock=r["lock"]))
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    assert len(holders) >= 30, holders
    assert holders == sorted(set(holders)), holders
    assert cluster.get_all(lock_key(res)) == [None] * 5


def test_fenced_without_multi_falls_back_to_script(cluster, daemon_factory):
    """An ACL user from before the native acquire (no +multi +exec): the
    first fenced acquire fails on every node (MULTI refused; the SET that
    then ran on its own is rolled back), later ones take the script."""
    _need_native(cluster)
    need_acl_channels(cluster.nodes)
    from test_acl import USER, _acl_rules
    pw = "pw-native-acquire"
    rules = [r for r in _acl_rules(pw) if r not in ("+multi", "+exec")]
    admin = "admin-native-acquire"
    for nd in cluster.nodes:
        assert nd.cmd("ACL", "SETUSER", USER, *rules) == "OK"
        assert nd.cmd("ACL", "SETUSER", "default", "resetpass",
                      ">" + admin) == "OK"
        nd.password = admin
    args = []
    for nd in cluster.nodes:
        args += ["--node", "unix://%s:%s@%s" % (USER, pw, nd.path)]
    d = daemon_factory.start(cluster, name="d-acl", node_args=args)
    res = rname("natacl")
    key = lock_key(res)
    with d.client() as c:
        first = c.call("acquire", resource=res, fence=True)
        assert_error(first, "no_quorum")
        poll_until(lambda: cluster.get_all(key) == [None] * 5, 3.0,
                   what="the SETs that ran outside MULTI rolled back")
        assert cluster.get_all(key) == [None] * 5
        fences = []
        for _ in range(3):
            r = c.call("acquire", resource=res, fence=True)
            assert_ok(r, "fenced acquire through the script")
            fences.append(r["fence"])
            assert_ok(c.call("release", lock=r["lock"]))
        assert fences == sorted(set(fences)), fences
        # unfenced acquires never needed MULTI
        assert_ok(c.call("release",
                         lock=c.call("acquire", resource=res)["lock"]))
    assert "falls back to the script" in d.stderr_tail(200)
