"""A node emptied under the same run_id and replication id: FLUSHALL or
FLUSHDB of the daemon's db, or a fresh server behind the same address.
Neither a restart nor a sync showed it, so the node counted at once with
its lock keys gone: of a lock held on exactly three nodes, one flushed, a
second client got the same lock. Each node now holds a random mark in
<prefix>dataset, set by the first daemon to meet it and read at each
handshake and every second; a mark gone or set anew sends the node
through the quarantine of a restart (and its repair), persistent or
not. The mark's TTL (100 years) dates it, so a daemon started after the
flush, with no earlier mark to compare, sees the node's mark younger than
the others' and quarantines it as it would a node that started late."""

import re
import time

import pytest

from rl import (PREFIX, SLOW, assert_ok, lock_key, poll_until, rname)

DATASET = PREFIX + "dataset"


def _health(d, k):
    return d.health()["nodes"][k]


def _quarantined(d, k, timeout=10.0):
    ok, _ = poll_until(lambda: _health(d, k).get("quarantined") is True,
                       timeout * SLOW, 0.05)
    assert ok, (_health(d, k), d.stderr_tail(30))


def _held_on_three(cluster, c, res):
    """A lock whose key stands on nodes 1-3 only (4 and 5 never got it)."""
    r = c.call("acquire", resource=res, ttl_ms=30000)
    assert_ok(r)
    for nd in cluster.nodes[3:]:
        nd.cmd("DEL", lock_key(res))
    held = cluster.get_all(lock_key(res))
    assert [v is not None for v in held] == [True] * 3 + [False] * 2, held
    return r


def test_flushed_node_is_quarantined(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="flush")
    res = rname("flush")
    with d.client() as c:
        marks = cluster.get_all(DATASET)
        assert all(m is not None and len(m) == 32 for m in marks), marks
        _held_on_three(cluster, c, res)
        mark = len(d.stderr_text())
        cluster.nodes[0].cmd("FLUSHALL")
        _quarantined(d, 0)
        log = d.stderr_text()[mark:]
        assert "the data-set key %s is gone" % DATASET in log, log
        assert "node 1: its keys are gone (its data-set key was emptied" \
            in log, log
        # a new mark, not the old one
        assert cluster.nodes[0].cmd("GET", DATASET) not in (None, marks[0])
        with d.client() as other:
            r2 = other.call("acquire", resource=res, ttl_ms=5000)
            assert r2["ok"] is False, "a second holder: %r" % r2
            assert r2["error"]["code"] in ("busy", "no_quorum"), r2


@pytest.mark.parametrize("form", ["set_get", "fenced", "script"])
def test_flushed_node_does_not_vote_before_the_check(
        cluster, daemon_factory, form):
    """The check every second left a flushed node up to a second to vote
    with its keys gone: an acquire right after the flush won on it. Each
    write of acquires now ends with a GET of the mark, and the acquires'
    replies count only if the mark stood after them: the node is dropped
    (and quarantined) before it can grant the lock a second time. Every
    form of acquire: SET NX GET, MULTI with INCR (fenced), the script."""
    extra = ["--acquire-script"] if form == "script" else []
    d = daemon_factory.start(cluster, name="flv" + form, extra=extra)
    fence = form == "fenced"
    res = rname("flvote")
    with d.client() as c, d.client() as other:
        r = c.call("acquire", resource=res, ttl_ms=30000, fence=fence)
        assert_ok(r)
        for nd in cluster.nodes[3:]:
            nd.cmd("DEL", lock_key(res))
        mark = len(d.stderr_text())
        cluster.nodes[0].cmd("FLUSHALL")
        r2 = other.call("acquire", resource=res, ttl_ms=5000, fence=fence)
        assert r2["ok"] is False, "a second holder: %r" % r2
        assert r2["error"]["code"] in ("busy", "no_quorum"), r2
        _quarantined(d, 0)
        log = d.stderr_text()[mark:]
        assert "the data-set key %s is gone" % DATASET in log, log


def test_another_daemon_does_not_count_a_flushed_node(
        cluster, daemon_factory):
    """The same through a second running daemon, which did not take the
    lock: whichever sets the new mark first, it finds the mark gone or
    set anew before it counts the node's vote."""
    a = daemon_factory.start(cluster, name="flva")
    b = daemon_factory.start(cluster, name="flvb")
    res = rname("flvab")
    with a.client() as c, b.client() as other:
        _held_on_three(cluster, c, res)
        cluster.nodes[0].cmd("FLUSHALL")
        r2 = other.call("acquire", resource=res, ttl_ms=5000)
        assert r2["ok"] is False, "a second holder: %r" % r2
        _quarantined(b, 0)


def test_every_running_daemon_sees_a_flush(cluster, daemon_factory):
    """Whichever daemon looks first sets a new mark; another finds the
    mark gone or, if it looks later, set anew: either way it quarantines
    the node as well."""
    a = daemon_factory.start(cluster, name="fla")
    b = daemon_factory.start(cluster, name="flb")
    ma, mb = len(a.stderr_text()), len(b.stderr_text())
    cluster.nodes[1].cmd("FLUSHDB")
    _quarantined(a, 1)
    _quarantined(b, 1)
    for log in (a.stderr_text()[ma:], b.stderr_text()[mb:]):
        assert "is gone (" in log or "is set anew (" in log, log
        assert log.count("node 2: its keys are gone") == 1, log


def test_persistent_node_flushed_is_quarantined_and_repaired(
        cluster, daemon_factory):
    """?persistent=1 skips the quarantine of a restart, since the AOF
    keeps the keys; a flush loses them anyway. After the quarantine the
    repair copies the done marks back."""
    n5 = cluster.nodes[4]
    n5.turn_aof_on()  # its URI says ?persistent=1
    d = daemon_factory.start(cluster, name="flushp",
                             extra=["--quarantine-ms", "1000"])
    assert n5.uri.endswith("?persistent=1") and n5.uri in d.argv
    res = rname("flushp")
    with d.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=5000)
        assert_ok(r)
        assert_ok(c.call("complete", lock=r["lock"], keep_ms=60000))
        n5.cmd("FLUSHALL")
        _quarantined(d, 4)
        ok, _ = poll_until(
            lambda: _health(d, 4).get("quarantined") is False and
            _health(d, 4).get("up") is True, 15.0 * SLOW, 0.1)
        assert ok, (_health(d, 4), d.stderr_tail(30))
        assert n5.cmd("GET", lock_key(res)) == ("done:" + r["lock"]).encode()


def test_a_persistent_restart_that_kept_its_keys_counts_at_once(
        cluster, daemon_factory):
    """The mark comes back with the AOF: no quarantine, as before."""
    n5 = cluster.nodes[4]
    n5.turn_aof_on()
    d = daemon_factory.start(cluster, name="keptp")
    before = n5.cmd("GET", DATASET)
    assert before is not None
    n5.restart()
    d.wait_all_up(10.0 * SLOW)
    assert n5.cmd("GET", DATASET) == before
    assert _health(d, 4).get("quarantined") is False, _health(d, 4)
    assert "its keys are gone" not in d.stderr_text()


# The mark's TTL (sidecar/restart.h, RESTART_DATASET_TTL_MS): what is left
# of it dates the mark on the node's own clock.
DATASET_TTL_MS = 3153600000000


def _age_marks(cluster, seconds):
    """Dates every node's mark `seconds` back, as if the cluster had been
    in use that long (PEXPIRE keeps the mark itself)."""
    for nd in cluster.nodes:
        assert nd.cmd("PEXPIRE", DATASET, DATASET_TTL_MS - seconds * 1000) \
            == 1


def _kill(daemon_factory, d):
    """SIGKILL: the daemon's locks stay on the nodes until their ttl."""
    d.kill()
    daemon_factory.daemons.remove(d)


def test_marks_carry_their_age(cluster, daemon_factory):
    daemon_factory.start(cluster, name="age")
    for nd in cluster.nodes:
        left = nd.cmd("PTTL", DATASET)
        assert DATASET_TTL_MS - 60000 < left <= DATASET_TTL_MS, left


def test_fresh_daemon_after_a_flush_quarantines_the_node(
        cluster, daemon_factory):
    """A daemon started after a node was emptied has no earlier mark to
    compare; the mark's age tells it: node 1's data set is younger than
    the others', so it sits out the quarantine, and a lock that stood on
    nodes 1-3 before the flush is not granted again through 1, 4, 5.
    Before the mark had an age, the fresh daemon granted it."""
    a = daemon_factory.start(cluster, name="flfa")
    res = rname("flfresh")
    with a.client() as c:
        _held_on_three(cluster, c, res)
        _age_marks(cluster, 60)
        _kill(daemon_factory, a)  # the lock stays on nodes 1-3
    cluster.nodes[0].cmd("FLUSHALL")
    b = daemon_factory.start(cluster, name="flfb")
    _quarantined(b, 0)
    assert [_health(b, k).get("quarantined") for k in range(5)] == \
        [True, False, False, False, False], b.health()
    log = b.stderr_text()
    assert re.search(r"node 1: its data-set key was set \d+ s after another "
                     r"node's \(it was emptied, or is new to the cluster\)",
                     log), log
    with b.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=5000)
        assert r["ok"] is False, "a second holder: %r" % r
        assert r["error"]["code"] in ("busy", "no_quorum"), r


def test_fresh_daemon_after_a_mark_set_anew_quarantines_the_node(
        cluster, daemon_factory):
    """The same when a running daemon saw the flush first and set a new
    mark: the new mark is young, and a daemon started now sees it."""
    a = daemon_factory.start(cluster, name="flna",
                             extra=["--quarantine-ms", "60000"])
    _age_marks(cluster, 60)
    cluster.nodes[2].cmd("FLUSHDB")
    _quarantined(a, 2)
    left = cluster.nodes[2].cmd("PTTL", DATASET)
    assert left > DATASET_TTL_MS - 30000, left  # a young mark
    b = daemon_factory.start(cluster, name="flnb",
                             extra=["--quarantine-ms", "60000"])
    _quarantined(b, 2)
    assert "node 3: its data-set key was set" in b.stderr_text()


def test_fresh_daemon_persistent_node_flushed_is_quarantined(
        cluster, daemon_factory):
    """A persistent node's start says nothing of its keys, its mark does:
    flushed before a daemon started, it is quarantined all the same."""
    n5 = cluster.nodes[4]
    n5.turn_aof_on()
    a = daemon_factory.start(cluster, name="flpa")
    _age_marks(cluster, 60)
    _kill(daemon_factory, a)
    n5.cmd("FLUSHALL")
    b = daemon_factory.start(cluster, name="flpb")
    assert n5.uri in b.argv and n5.uri.endswith("?persistent=1")
    _quarantined(b, 4)
    assert "node 5: its data-set key was set" in b.stderr_text()


def test_fresh_daemon_counts_nodes_with_old_marks(cluster, daemon_factory):
    """Marks of one age, or marks an older daemon set without a TTL, hold
    no node back."""
    a = daemon_factory.start(cluster, name="olda")
    _age_marks(cluster, 60)
    for nd in cluster.nodes[:2]:
        assert nd.cmd("PERSIST", DATASET) == 1
    _kill(daemon_factory, a)
    b = daemon_factory.start(cluster, name="oldb")
    b.wait_all_up(10.0 * SLOW)
    with b.client() as c:
        assert_ok(c.call("acquire", resource=rname("old"), ttl_ms=5000))
    assert [_health(b, k).get("quarantined") for k in range(5)] == \
        [False] * 5, b.health()
    assert "its data-set key was set" not in b.stderr_text()
    # the undated marks got their TTL, for the daemons that come later
    for nd in cluster.nodes[:2]:
        left = nd.cmd("PTTL", DATASET)
        assert DATASET_TTL_MS - 60000 < left <= DATASET_TTL_MS, left


# ---- a node whose mark is not known ---------------------------------------
# A refused SET of the mark (OOM at maxmemory under noeviction, NOREPLICAS,
# MISCONF, ...) on a node that had none left the connection without a mark:
# neither the guard nor the check every second ran on it, so a FLUSHALL
# went unseen and a held lock was granted again. Such a node now comes up
# without a vote (health: "not_counted", and why), the mark is tried again
# every second, and the node counts once a reconnect reads it.

OOM = "OOM command not allowed"
NO_MARK = "no data-set mark (data-set key: SET refused (OOM"


def _oom(node, on):
    node.cmd("CONFIG", "SET", "maxmemory", "1" if on else "0")


def _start_with_node1_full(cluster, daemon_factory, name):
    """A daemon whose first handshake with node 1 met it at maxmemory."""
    _oom(cluster.nodes[0], True)
    try:
        d = daemon_factory.start(cluster, name=name)
        assert cluster.nodes[0].cmd("GET", DATASET) is None
    except BaseException:
        _oom(cluster.nodes[0], False)
        raise
    return d


def _counted(d, k, timeout=40.0):
    """Until node k is up and its acquires count (no quarantine: a mark
    set more than 3 s after the others' would sit out one)."""
    def counted():
        n = _health(d, k)
        return n["up"] and not n["quarantined"] and "not_counted" not in n
    ok, _ = poll_until(counted, timeout * SLOW, 0.05)
    assert ok, (_health(d, k), d.stderr_tail(30))


def test_refused_mark_does_not_let_a_flush_grant_twice(
        cluster, daemon_factory):
    """The node full while the daemon connects, then not: client A holds R
    on nodes 1-3, node 1 is flushed, and 2.5 s later client B must not get
    R on nodes 1, 4 and 5 while A's 60 s are far from over."""
    d = _start_with_node1_full(cluster, daemon_factory, "oomflush")
    _oom(cluster.nodes[0], False)
    _counted(d, 0)
    res = rname("oomflush")
    with d.client() as a:
        r = a.call("acquire", resource=res, ttl_ms=60000)
        assert_ok(r)
        for nd in cluster.nodes[3:]:
            nd.cmd("DEL", lock_key(res))
        held = cluster.get_all(lock_key(res))
        assert [v is not None for v in held] == [True] * 3 + [False] * 2, \
            held
        cluster.nodes[0].cmd("FLUSHALL")
        time.sleep(2.5)
        with d.client() as b:
            r2 = b.call("acquire", resource=res, ttl_ms=5000)
            assert r2["ok"] is False, "a second holder: %r on %r" % (
                r2, cluster.get_all(lock_key(res)))
            assert r2["error"]["code"] in ("busy", "no_quorum"), r2
    assert _health(d, 0)["quarantined"] is True, d.health()


def test_refused_mark_node_votes_once_the_mark_is_set(
        cluster, daemon_factory):
    """While node 1 refuses the mark, health says it does not count, and
    why; once it takes writes the mark is set, and it votes again."""
    d = _start_with_node1_full(cluster, daemon_factory, "oomvote")
    try:
        h = d.health()
        n1 = h["nodes"][0]
        assert n1["up"] is True and OOM in n1.get("not_counted", ""), h
        assert h["ok"] is True, h  # four nodes still count
        assert [("not_counted" in n) for n in h["nodes"]] == \
            [True] + [False] * 4, h
    finally:
        _oom(cluster.nodes[0], False)
    _counted(d, 0)
    mark = cluster.nodes[0].cmd("GET", DATASET)
    assert mark is not None and len(mark) == 32, mark
    res = rname("oomvote")
    with d.client() as c:
        assert_ok(c.call("acquire", resource=res, ttl_ms=10000))
        assert cluster.nodes[0].cmd("GET", lock_key(res)) is not None
    assert "the data-set mark is read again: its acquires count" in \
        d.stderr_text()


def test_refused_mark_is_logged_once_with_its_reason(
        cluster, daemon_factory):
    """The first refusal is told with the node's error; the retries every
    second are not, nor the reconnects in between."""
    d = _start_with_node1_full(cluster, daemon_factory, "oomlog")
    try:
        time.sleep(3.5)  # three retries or more, each refused
        h = _health(d, 0)
        assert OOM in h.get("not_counted", ""), h
    finally:
        _oom(cluster.nodes[0], False)
    ok, _ = poll_until(lambda: "not_counted" not in _health(d, 0),
                       10.0 * SLOW, 0.05)
    assert ok, (_health(d, 0), d.stderr_tail(30))
    lines = [ln for ln in d.stderr_text().splitlines() if NO_MARK in ln]
    assert len(lines) == 1, d.stderr_tail(40)
    assert "node 1" in lines[0], lines
    # set more than 3 s after the others' marks: the node was met without
    # a mark to date, so it sits out the rest of the period as a node
    # emptied before the daemon met it would
    _quarantined(d, 0)
    assert "node 1: its data-set key was set" in d.stderr_text()


def test_unreadable_mark_node_does_not_vote(cluster, daemon_factory):
    """A mark that cannot be read (another type under the key: GET answers
    WRONGTYPE) on a node that takes writes: its acquires do not count, so
    it holds none of them, until its key is a mark again."""
    n1 = cluster.nodes[0]
    n1.cmd("RPUSH", DATASET, "not-a-mark")
    d = daemon_factory.start(cluster, name="wrongtype")
    res = rname("wrongtype")
    with d.client() as c:
        assert_ok(c.call("acquire", resource=res, ttl_ms=10000))
        held = cluster.get_all(lock_key(res))
        assert [v is not None for v in held] == [False] + [True] * 4, held
    h = _health(d, 0)
    assert "WRONGTYPE" in h.get("not_counted", ""), d.health()
    n1.cmd("DEL", DATASET)
    ok, _ = poll_until(lambda: "not_counted" not in _health(d, 0),
                       10.0 * SLOW, 0.05)
    assert ok, (_health(d, 0), d.stderr_tail(30))
    mark = n1.cmd("GET", DATASET)
    assert mark is not None and len(mark) == 32, mark


def test_mark_unreadable_on_a_live_connection_stops_the_vote(
        cluster, daemon_factory):
    """The check every second took an error reply for a mark it could not
    compare and went on: the node kept counting with its mark unread. Now
    the check's error drops the connection, as a refused guard does, and
    the reconnect finds no mark: the node does not count until it has one
    again."""
    d = daemon_factory.start(cluster, name="liveunread")
    n1 = cluster.nodes[0]
    n1.cmd("DEL", DATASET)
    n1.cmd("RPUSH", DATASET, "not-a-mark")
    ok, _ = poll_until(
        lambda: "WRONGTYPE" in _health(d, 0).get("not_counted", ""),
        10.0 * SLOW, 0.05)
    assert ok, (_health(d, 0), d.stderr_tail(30))
    assert "the data-set check was refused (WRONGTYPE" in d.stderr_text()
