"""Nodes that answer but refuse: a node out of memory under noeviction
answers every write with OOM (a MULTI with EXECABORT). A majority of them
is no quorum, and the answer says what the nodes said rather than blame
their speed; the log names each node's refusal at most once a second; and
a refused transaction does not make the daemon give up MULTI/EXEC on
that node (only an ACL refusing MULTI or EXEC does: test_native_acquire)."""

import contextlib
import re
import time

from extra import metric, scrape
from rl import PREFIX, assert_error, assert_ok, lock_key, rname

OOM = "OOM command not allowed"


def _oom(nodes, on):
    for nd in nodes:
        nd.cmd("CONFIG", "SET", "maxmemory", "1" if on else "0")


@contextlib.contextmanager
def _out_of_memory(nodes):
    """nodes refuse every write with OOM inside the block."""
    _oom(nodes, True)
    try:
        yield
    finally:
        _oom(nodes, False)


def _refusal_lines(d, node_no):
    return [ln for ln in d.stderr_text().splitlines()
            if "node %d: acquire: unexpected reply: OOM" % node_no in ln]


def test_oom_majority_is_named_in_the_answer(cluster, daemon):
    c = daemon.client()
    held = c.call("acquire", resource=rname("done"), ttl_ms=10000)
    assert_ok(held)
    with _out_of_memory(cluster.nodes[:3]), c:
        # complete writes its done mark: refused as the acquire is
        r = c.call("complete", lock=held["lock"], keep_ms=60000)
        assert_error(r, "no_quorum")
        assert r["error"]["message"].startswith(
            "fewer than a quorum of nodes accepted it: 3 refused"), r
        r = c.call("acquire", resource=rname("oom"), ttl_ms=5000)
        assert_error(r, "no_quorum")
        msg = r["error"]["message"]
        assert msg.startswith(
            "fewer than a quorum of nodes accepted it: 3 refused (node "
        ), r
        assert OOM in msg and len(msg) <= 256, r
        # health still counts them up (they answer), and says what
        # they answer
        h = daemon.health()
        assert h["ok"] is True, h
        assert [OOM in (n.get("refusing") or "")
                for n in h["nodes"]] == [True] * 3 + [False] * 2, h
        m = scrape(daemon.socket)
        assert [metric(m, "redlockd_node_refusing", node=n["addr"])
                for n in h["nodes"]] == [1, 1, 1, 0, 0], m
        # one node out of memory is no loss: four still make a quorum
        _oom(cluster.nodes[1:3], False)
        res = rname("oom1")
        r = c.call("acquire", resource=res, ttl_ms=5000)
        assert_ok(r)
        assert cluster.get_all(lock_key(res))[0] is None
        # the two fixed nodes accepted it, and refuse no longer
        assert [bool(n.get("refusing"))
                for n in daemon.health()["nodes"]] == [True] + [False] * 4


def test_refusals_are_logged_once_a_second_per_node(cluster, daemon):
    with _out_of_memory(cluster.nodes[:1]):
        with daemon.client() as c:
            t0 = time.monotonic()
            for k in range(40):
                assert_ok(c.call("acquire", resource=rname("lim%d" % k),
                                 ttl_ms=5000))
            burst_s = time.monotonic() - t0
            lines = _refusal_lines(daemon, 1)
            assert 1 <= len(lines) <= 1 + int(burst_s), lines
            time.sleep(1.1)
            assert_ok(c.call("acquire", resource=rname("lim"), ttl_ms=5000))
        lines = _refusal_lines(daemon, 1)
        m = re.search(r"\((\d+) more since the last such line\)", lines[-1])
        assert m and int(m.group(1)) >= 1, lines
        assert _refusal_lines(daemon, 2) == []


def test_a_refused_transaction_keeps_multi_exec(cluster, daemon):
    with _out_of_memory(cluster.nodes[:3]), daemon.client() as c:
        r = c.call("acquire", resource=rname("f"), ttl_ms=5000, fence=True)
        assert_error(r, "no_quorum")
        # EXEC says only "previous errors": the answer names the one that
        # aborted the transaction, as the unfenced acquire's does
        msg = r["error"]["message"]
        print("answer: %s" % msg)
        assert "EXECABORT" in msg and OOM in msg, r
        assert [OOM in (n.get("refusing") or "")
                for n in daemon.health()["nodes"]] == [True] * 3 + [False] * 2
    assert "falls back to the script" not in daemon.stderr_text()
    cluster.each("CONFIG", "RESETSTAT")
    with daemon.client() as c:
        assert_ok(c.call("acquire", resource=rname("f2"), ttl_ms=5000,
                         fence=True))
    for info in cluster.each("INFO", "commandstats"):
        text = info.decode()
        assert re.search(r"cmdstat_exec:calls=1,", text), text


def test_an_error_inside_exec_is_named(cluster, daemon):
    """A fenced acquire runs in MULTI/EXEC, whose answer is an array of
    each command's reply: a node refusing one of them (WRONGTYPE, the fence
    counter or the lock key holding a list) used to show as "(unexpected
    shape)" in the answer and in health's refusing. The node's own error
    is named now."""
    fkey = PREFIX + "fence"
    res = rname("wt")
    for what, key in (("the fence counter", fkey),
                      ("the lock key", lock_key(res))):
        for nd in cluster.nodes[:3]:
            nd.cmd("RPUSH", key, "not a counter")
        try:
            with daemon.client() as c:
                r = c.call("acquire", resource=res, ttl_ms=5000, fence=True)
                assert_error(r, "no_quorum")
                msg = r["error"]["message"]
                print("%s: %s" % (what, msg))
                assert msg.startswith(
                    "fewer than a quorum of nodes accepted it: 3 refused "
                    "(node 1: WRONGTYPE"), (what, r)
                assert len(msg) <= 256, r
                refusing = [n.get("refusing") or ""
                            for n in daemon.health()["nodes"]]
                assert [x.startswith("WRONGTYPE") for x in refusing] == \
                    [True] * 3 + [False] * 2, (what, refusing)
        finally:
            for nd in cluster.nodes[:3]:
                nd.cmd("DEL", key)
    with daemon.client() as c:
        g = c.call("acquire", resource=res, ttl_ms=5000, fence=True)
        assert_ok(g)
        assert_ok(c.call("release", lock=g["lock"]))
    assert not any(n.get("refusing") for n in daemon.health()["nodes"])
