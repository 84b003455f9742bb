"""What a node restart without persistence may cost, against real
redis-servers.

- a node that is down but never seen to restart kept its fence
  counter; the repair of a restarted node waits for it rather than reading
  the nodes that happen to be up, so a fence never goes backwards; a
  node up without its data-set mark is no source either;
- done marks on a quorum survive the restart of any minority of
  nodes (they are copied back before a restarted node counts again), and
  marks on quorum - 1 nodes answer done even when a quorum is free;
- the restart quarantine counts only TTLs that were granted.
"""

import re
import socket
import time

import pytest
from rl import (PREFIX, SLOW, assert_error, assert_ok, lock_key,
                need_acl_channels, poll_until, rname, wait_for)

QUARANTINE = ["--quarantine-ms", "300"]


def _health_nodes(daemon):
    return daemon.health().get("nodes") or []


def _wait_quarantine_over(daemon, k, timeout):
    """Until node k (0-based) is up and no longer quarantined."""
    def over():
        nodes = _health_nodes(daemon)
        return (len(nodes) > k and nodes[k].get("up") is True and
                nodes[k].get("quarantined") is False)
    ok, took = poll_until(over, timeout, 0.05)
    assert ok, "node %d still quarantined after %.1fs: %r\n%s" % (
        k + 1, took, _health_nodes(daemon), daemon.stderr_tail(40))
    return took


def _wait_none_quarantined(daemon):
    """On a loaded machine the five redis-servers may start seconds apart,
    and a daemon then quarantines the late ones as possibly restarted
    (for the quarantine period): wait that out."""
    ok, _ = poll_until(lambda: not any(n.get("quarantined") for n in
                                       _health_nodes(daemon)),
                       40.0 * SLOW, 0.1)
    assert ok, _health_nodes(daemon)


def _wait_log(daemon, pattern, timeout, after=0):
    """The first match of pattern in the daemon's log past offset after."""
    rx = re.compile(pattern)

    def find():
        return rx.search(daemon.stderr_text(), after)
    m, _ = poll_until(find, timeout, 0.05)
    assert m, "no %r in the log within %.0fs:\n%s" % (
        pattern, timeout, daemon.stderr_tail(40))
    return m


def _restart_seen(cluster, daemon, ks):
    """kill -9 and restart nodes ks (0-based) empty; returns once the
    daemon has logged each restart."""
    mark = len(daemon.stderr_text())
    for k in ks:
        cluster.nodes[k].restart()
    for k in ks:
        _wait_log(daemon, r"node %d: restarted \(new run_id\)" % (k + 1),
                  10.0 * SLOW, mark)


def _fences_on_first_three(cluster, daemon, res):
    """Five fenced acquires and releases of res through daemon with nodes
    4 and 5 holding a stale key, so each fence is written back on nodes
    1-3 only (the counters of 4 and 5 rise too). Returns the fences."""
    for nd in cluster.nodes[3:]:
        assert nd.cmd("SET", lock_key(res), "stale", "PX", "60000") == "OK"
    fences = []
    with daemon.client() as c:
        for _ in range(5):
            r = c.call("acquire", resource=res, ttl_ms=10000, fence=True)
            assert_ok(r, "the fenced acquire")
            fences.append(r["fence"])
            assert_ok(c.call("release", lock=r["lock"]))
    return fences


# -- fence counters: a repair never takes a fence backwards -------------


def test_fence_not_backwards_when_sound_nodes_are_only_down(cluster,
                                                            daemon_factory):
    """Daemon B hands out fences 1..5 with write-back quorum {1,2,3} (nodes
    4 and 5 hold a stale key). Nodes 2 and 3 go down (paused: down, not
    lost); node 1 restarts empty. Daemon A must not repair node 1 from
    nodes 4 and 5 alone (their counters never saw those fences): node 1
    stays quarantined, A's fenced acquire answers no_quorum rather than a
    fence that went backwards, and once nodes 2 and 3 are back node 1 is
    repaired from them and the next fence exceeds 5."""
    a = daemon_factory.start(cluster, name="a", extra=QUARANTINE)
    b = daemon_factory.start(cluster, name="b", extra=QUARANTINE)
    res = rname("f14")
    fences = _fences_on_first_three(cluster, b, res)
    print("B's fences: %r; counters: %r" % (
        fences, cluster.each("GET", PREFIX + "fence")))
    assert fences == sorted(set(fences)) and fences[-1] >= 5, fences
    for nd in cluster.nodes[3:]:
        nd.cmd("DEL", lock_key(res))

    for nd in cluster.nodes[1:3]:
        nd.pause()

    def two_down():
        nodes = _health_nodes(a)
        return not nodes[1]["up"] and not nodes[2]["up"]
    ok, _ = poll_until(two_down, 15.0 * SLOW, 0.1)
    assert ok, "A never saw nodes 2 and 3 down: %r" % _health_nodes(a)

    _restart_seen(cluster, a, [0])
    # The quarantine (300 ms) is over and a repair was tried (the old
    # code's log line, or the new one's).
    _wait_log(a, r"node 1: (too few nodes that kept their data|fence "
              r"counter repaired)", 10.0 * SLOW)
    with a.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000, fence=True)
        print("A's fenced acquire with nodes 2, 3 down: %r" % r)
        assert r.get("fence", fences[-1] + 1) > fences[-1], (
            "fence went backwards: %r after %r" % (r, fences))
        assert_error(r, "no_quorum")
    assert _health_nodes(a)[0]["quarantined"] is True

    for nd in cluster.nodes[1:3]:
        nd.resume()
    took = _wait_quarantine_over(a, 0, 20.0 * SLOW)
    print("node 1 repaired %.2fs after nodes 2 and 3 came back" % took)
    _wait_log(a, r"node 1: repaired from 3 node\(s\)", 5.0)
    with a.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000, fence=True)
        assert_ok(r, "A's fenced acquire after the repair")
        print("A's fence after the repair: %r" % r["fence"])
        assert r["fence"] > fences[-1], (r, fences)
    assert "fences may repeat" not in a.stderr_text()



def test_node_without_its_mark_is_no_repair_source(cluster, daemon_factory):
    """Daemon B hands out fences 1..5 on nodes 1, 2 and 3 only. Node
    2 is then emptied and its data-set key made unreadable (another type),
    so daemon A, started after, meets it up but without a mark: it does
    not vote, and its fence counter (gone) proves nothing. Node 3 pauses
    and node 1 restarts empty. Reading nodes 2, 4 and 5 would repair node
    1 with a counter below 5 and hand out a fence that went backwards: A
    must count only 4 and 5 as nodes that kept their data, keep node 1
    quarantined, and repair it from 3, 4 and 5 once node 3 is back."""
    b = daemon_factory.start(cluster, name="b", extra=QUARANTINE)
    res = rname("unmarked-src")
    fences = _fences_on_first_three(cluster, b, res)
    b.stop()
    # nodes 4 and 5 missed those fences (as if they had been down)
    for nd in cluster.nodes[3:]:
        nd.cmd("DEL", lock_key(res), PREFIX + "fence")
    counters = cluster.each("GET", PREFIX + "fence")
    print("B's fences: %r; counters: %r" % (fences, counters))
    assert fences[-1] >= 5, fences
    n2 = cluster.nodes[1]
    n2.cmd("FLUSHALL")
    n2.cmd("RPUSH", PREFIX + "dataset", "not-a-mark")

    a = daemon_factory.start(cluster, name="a", extra=QUARANTINE)
    ok, _ = poll_until(
        lambda: "WRONGTYPE" in (_health_nodes(a)[1].get("not_counted") or ""),
        10.0 * SLOW, 0.05)
    assert ok, _health_nodes(a)
    ok, _ = poll_until(lambda: not any(
        n.get("quarantined") for k, n in enumerate(_health_nodes(a))
        if k != 1), 40.0 * SLOW, 0.1)
    assert ok, _health_nodes(a)

    cluster.nodes[2].pause()
    ok, _ = poll_until(lambda: not _health_nodes(a)[2]["up"],
                       15.0 * SLOW, 0.1)
    assert ok, "A never saw node 3 down: %r" % _health_nodes(a)

    _restart_seen(cluster, a, [0])
    _wait_log(a, r"node 1: (too few nodes that kept their data|repaired "
              r"from)", 10.0 * SLOW)
    assert "node 1: repaired from" not in a.stderr_text(), \
        a.stderr_tail(30)
    with a.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000, fence=True)
        print("A's fenced acquire with node 2 unmarked, 3 down: %r" % r)
        assert r.get("fence", fences[-1] + 1) > fences[-1], (
            "fence went backwards: %r after %r" % (r, fences))
        assert_error(r, "no_quorum")
    assert _health_nodes(a)[0]["quarantined"] is True

    cluster.nodes[2].resume()
    _wait_quarantine_over(a, 0, 20.0 * SLOW)
    _wait_log(a, r"node 1: repaired from 3 node\(s\)", 5.0)
    with a.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000, fence=True)
        assert_ok(r, "A's fenced acquire after the repair")
        assert r["fence"] > fences[-1], (r, fences)



def test_a_refused_counter_raise_says_why(cluster, daemon_factory):
    """The repair's last step, raising the restarted node's fence counter,
    refused by the node (here a key of another type under the counter's
    name): the log names the node's own error, the node stays
    quarantined, and the repair succeeds once the key is fixed."""
    d = daemon_factory.start(cluster, name="raise",
                             extra=["--quarantine-ms", "2000"])
    _wait_none_quarantined(d)
    _restart_seen(cluster, d, [0])
    cluster.nodes[0].cmd(
        "EVAL", "redis.call('DEL', KEYS[1]) "
        "redis.call('RPUSH', KEYS[1], 'not-a-counter')", "1",
        PREFIX + "fence")
    m = _wait_log(d, r"node 1: repair: the fence counter was not raised "
                  r"\(([^)]*)", 10.0 * SLOW)
    assert "WRONGTYPE" in m.group(1), m.group(0)
    assert _health_nodes(d)[0]["quarantined"] is True
    cluster.nodes[0].cmd("DEL", PREFIX + "fence")
    _wait_quarantine_over(d, 0, 20.0 * SLOW)


# -- done marks: kept through restarts, repaired in batches -------------


def _slot_key(res, permit):
    return "%ssem:%d:%s" % (PREFIX, permit, res)


def _complete_on_first_three(cluster, daemon, res, keep_ms, permits=None):
    """acquire + complete (of one of `permits` permits, if given) with nodes
    4 and 5 holding a stale key (every slot's), so the done mark lands on
    exactly a quorum, nodes 1-3. Returns the marked key and the mark."""
    keys = [lock_key(res)] if permits is None else \
        [_slot_key(res, k) for k in range(permits)]
    for nd in cluster.nodes[3:]:
        for key in keys:
            assert nd.cmd("SET", key, "stale", "PX", "60000") == "OK"
    sem = {} if permits is None else {"permits": permits}
    with daemon.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=20000, **sem)
        assert_ok(r, "acquire")
        assert_ok(c.call("complete", lock=r["lock"], keep_ms=keep_ms),
                  "complete")
    for nd in cluster.nodes[3:]:
        nd.cmd("DEL", *keys)
    key = lock_key(res) if permits is None else _slot_key(res, r["permit"])
    mark = b"done:" + r["lock"].encode()
    assert cluster.get_all(key) == [mark] * 3 + [None] * 2
    return key, mark


def _assert_completed(daemon, res, key, permits):
    """A completed lock answers done; a semaphore with one permit completed
    admits one holder fewer: the others are granted, then busy. The ttl is
    long so that only a rollback, never an expiry, clears what a refused
    acquire wrote."""
    with daemon.client() as c:
        if permits is None:
            r = c.call("acquire", resource=res, ttl_ms=60000)
            print("acquire of the completed resource: %r" % r)
            assert_error(r, "done")
            return
        got = [c.call("acquire", resource=res, ttl_ms=60000, permits=permits)
               for _ in range(permits)]
        print("acquires of the semaphore with a completed permit: %r" % got)
        for r in got[:-1]:
            assert_ok(r, "a permit not completed")
            assert _slot_key(res, r["permit"]) != key, r
        assert_error(got[-1], "busy")
        for r in got[:-1]:
            assert_ok(c.call("release", lock=r["lock"]))


@pytest.mark.parametrize("permits", [None, 2], ids=["lock", "permit"])
def test_done_marks_survive_minority_restarts(cluster, daemon_factory,
                                              permits):
    """A mark on exactly a quorum (nodes 1-3). Node 1 restarts empty: after
    its quarantine it has the mark again, with the PTTL it had elsewhere,
    and the resource answers done. Then nodes 2 and 3 restart together
    (a minority of two, both marked): both get it back, and done it stays.
    The same for a completed permit of a semaphore, whose mark is on its
    slot key (proto/README.md: complete works on a permit as on a lock):
    the semaphore keeps admitting one holder fewer."""
    d = daemon_factory.start(cluster, name="dm", extra=QUARANTINE)
    res = rname("d14")
    keep = 600000
    key, mark = _complete_on_first_three(cluster, d, res, keep, permits)

    _restart_seen(cluster, d, [0])
    _wait_quarantine_over(d, 0, 15.0 * SLOW)
    vals = cluster.get_all(key)
    print("after node 1's repair: %r, pttl %r" % (
        vals, cluster.pttl_all(key)))
    assert vals[0] == mark, vals
    pttl = cluster.nodes[0].cmd("PTTL", key)
    assert 0 < pttl <= keep, pttl
    _assert_completed(d, res, key, permits)

    _restart_seen(cluster, d, [1, 2])
    _wait_quarantine_over(d, 1, 15.0 * SLOW)
    _wait_quarantine_over(d, 2, 15.0 * SLOW)
    vals = cluster.get_all(key)
    print("after nodes 2 and 3's repair: %r" % vals)
    assert vals == [mark] * 3 + [None] * 2, vals
    _assert_completed(d, res, key, permits)
    # The acquire that answered done wrote its token on nodes 4 and 5; the
    # answer goes out once the three done marks decide it, and the rollback
    # of those two follows their replies, so it may land after the answer.
    wait_for(lambda: cluster.get_all(key) == [mark] * 3 + [None] * 2,
             5.0 * SLOW, "the done acquire's rollback on nodes 4 and 5")


def test_rolling_restart_waiting_for_each_repair_keeps_done_marks(
        cluster, daemon_factory):
    """The rolling restart docs/operations.md asks for: one node at a time,
    the next only once the last is repaired (health: quarantined false).
    A mark on exactly a quorum (nodes 1-3) survives all five restarted
    empty in turn, and the resource still answers done."""
    d = daemon_factory.start(cluster, name="dr", extra=QUARANTINE)
    res = rname("roll")
    key, mark = _complete_on_first_three(cluster, d, res, 600000)
    for k in range(len(cluster.nodes)):
        _restart_seen(cluster, d, [k])
        _wait_quarantine_over(d, k, 15.0 * SLOW)
    vals = cluster.get_all(key)
    print("after the rolling restart: %r" % vals)
    assert vals.count(mark) >= 3, vals
    _assert_completed(d, res, key, None)
    assert "no sound read exists" not in d.stderr_text()


def test_rolling_restart_within_one_quarantine_keeps_done_marks(
        cluster, daemon_factory):
    """Nodes restarted one at a time, each before the last one's quarantine
    ended, count as restarted together: nodes 1-3 (the mark's quorum)
    restart in turn with nodes 4 and 5 up throughout, and at the end of
    the quarantines no sound read exists (the daemon says so). The marks
    survive all the same: each node copies them at once, at the start of
    its quarantine, from the nodes up (node 3 from nodes 1 and 2), and
    that copy ends no quarantine."""
    d = daemon_factory.start(cluster, name="dq",
                             extra=["--quarantine-ms", "8000"])
    _wait_none_quarantined(d)
    res = rname("rollq")
    key, mark = _complete_on_first_three(cluster, d, res, 600000)
    for k in range(3):
        mark_at = len(d.stderr_text())
        _restart_seen(cluster, d, [k])
        _wait_log(d, r"node %d: copied at once from \d node\(s\): 1 done "
                  r"mark" % (k + 1), 10.0 * SLOW, mark_at)
        assert cluster.nodes[k].cmd("GET", key) == mark
        assert _health_nodes(d)[k].get("quarantined") is True
    _wait_log(d, r"node \d: more nodes restarted without persistence than "
              r"a quorum can spare: no sound read exists", 20.0 * SLOW)
    for k in range(3):
        _wait_quarantine_over(d, k, 20.0 * SLOW)
    vals = cluster.get_all(key)
    print("after the quarantines: %r" % vals)
    assert vals.count(mark) >= 3, vals
    _assert_completed(d, res, key, None)


def test_mark_seen_holds_the_grant_until_answers_are_in(cluster,
                                                       daemon_factory):
    """Marks on nodes 2 and 5 only: what a quorum of marks leaves when a
    node lost its own and the daemon never saw it restart (it started
    later, or a proxy hid the restart). Nodes 1 and 5 are paused so the
    answers come in a known order: node 2's mark, nodes 3 and 4 ok, then
    node 1 ok, a third one. With a mark seen and node 5 still due, the
    acquire must wait for it rather than win; node 5's mark then makes it
    done, and no key is left behind. (The node timeout is long, so the
    pauses are answers late, not lost.)"""
    d = daemon_factory.start(cluster, name="dw",
                             extra=QUARANTINE + ["--node-timeout-ms",
                                                 "10000"])
    _wait_none_quarantined(d)
    res = rname("q14")
    for k in (1, 4):
        assert cluster.nodes[k].cmd("SET", lock_key(res), "done:" + "x" * 32,
                                    "PX", "60000") == "OK"
    with d.client(timeout=15.0) as c:
        cluster.nodes[0].pause()
        cluster.nodes[4].pause()
        c.send({"op": "acquire", "id": "a", "resource": res,
                "ttl_ms": 30000})
        time.sleep(0.5)
        cluster.nodes[0].resume()
        try:
            early = c.response("a", timeout=0.7)
        except socket.timeout:
            early = None
        cluster.nodes[4].resume()
        r = early or c.response("a", timeout=10.0)
        print("answered before node 5's answer: %r; answer: %r" % (
            early, r))
        assert early is None, "granted on the third ok: %r" % early
        assert_error(r, "done")

    def rolled_back():
        vals = cluster.get_all(lock_key(res))
        return vals[0] is None and vals[2] is None and vals[3] is None
    ok, _ = poll_until(rolled_back, 5.0 * SLOW)
    assert ok, cluster.get_all(lock_key(res))


def _fill_bulk_marks(cluster):
    """On nodes 1-3: 700 marks (several SCAN steps), plus what must not be
    copied: held locks, a mark outside the prefix, a key of another type
    under it."""
    fill = ("for i = 1, 700 do redis.call('SET', ARGV[1] .. i, "
            "'done:' .. string.rep('a', 31) .. i, 'PX', 600000) end "
            "for i = 1, 50 do redis.call('SET', ARGV[2] .. i, "
            "string.rep('b', 32), 'PX', 600000) end "
            "redis.call('SET', 'other:lock:x', 'done:y', 'PX', 600000) "
            "redis.call('HSET', ARGV[3], 'f', 'done:z') return 1")
    for nd in cluster.nodes[:3]:
        assert nd.cmd("EVAL", fill, 0, PREFIX + "lock:bulk-",
                      PREFIX + "lock:held-", PREFIX + "lock:hash") == 1


def test_done_mark_repair_in_batches(cluster, daemon_factory):
    """The marks of _fill_bulk_marks on nodes 1-3. Node 1 restarts: every
    mark comes back with a PTTL no longer than its source's, nothing else
    does."""
    d = daemon_factory.start(cluster, name="db", extra=QUARANTINE)
    _fill_bulk_marks(cluster)
    _restart_seen(cluster, d, [0])
    _wait_quarantine_over(d, 0, 20.0 * SLOW)
    n1 = cluster.nodes[0]
    keys = sorted(k for k in n1.cmd("KEYS", "*")
                  if k not in ((PREFIX + "fence").encode(),
                               (PREFIX + "dataset").encode()))
    print("node 1 after the repair: %d keys" % len(keys))
    want = sorted((PREFIX + "lock:bulk-%d" % i).encode()
                  for i in range(1, 701))
    assert keys == want, [k for k in keys if k not in want][:5]
    # Copied at once when the restart was seen, or at the quarantine's end
    # (a mark already there is not counted again): 700 in all.
    early = _wait_log(d, r"node 1: copied at once from \d node\(s\): "
                      r"(\d+) done mark", 5.0)
    m = _wait_log(d, r"node 1: repaired from \d node\(s\): (\d+) done mark",
                  5.0)
    assert int(early.group(1)) + int(m.group(1)) == 700, (early.group(0),
                                                          m.group(0))
    for i in (1, 350, 700):
        k = PREFIX + "lock:bulk-%d" % i
        assert n1.cmd("GET", k) == cluster.nodes[1].cmd("GET", k)
        assert 0 < n1.cmd("PTTL", k) <= 600000


class _Monitor:
    """MONITOR on one node, read on a thread of its own into lines until
    stop(); bounded by the socket's timeout and the stop flag."""

    def __init__(self, node):
        import threading
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(0.2)
        self.sock.connect(str(node.path))
        self.sock.sendall(b"MONITOR\r\n")
        self.buf = b""
        self.lines = []
        self.stopping = False
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        ok, _ = poll_until(lambda: self.lines[:1] == [b"+OK"], 5.0 * SLOW)
        assert ok, "MONITOR not answered: %r" % self.lines[:3]

    def _read(self):
        while not self.stopping:
            try:
                got = self.sock.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not got:
                return
            self.buf += got
            *done, self.buf = self.buf.split(b"\r\n")
            self.lines.extend(done)

    def stop(self):
        self.stopping = True
        self.thread.join(5.0)
        self.sock.close()
        return self.lines[1:]


_MON_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


def _script_key_misses(lines):
    """What the scripts of a MONITOR log touched beyond their KEYS: each
    command a script ran ("[db lua]") against the EVAL / EVALSHA that ran
    it (the command fed just before them: a script is atomic). Returns the
    misses, the scripts seen and the plain SCANs seen."""
    misses, scripts, scans, keys = [], 0, 0, None
    for line in lines:
        args = _MON_ARG.findall(line)
        if not args:
            continue
        cmd = args[0].upper()
        if b" lua]" not in line.split(b'"', 1)[0]:
            keys = None
            if cmd in (b"EVAL", b"EVALSHA"):
                scripts += 1
                n = int(args[2])
                keys = set(args[3:3 + n])
            elif cmd == b"SCAN":
                scans += 1
            continue
        if cmd == b"PUBLISH":
            continue  # a channel, not a key
        if keys is None or cmd in (b"SCAN", b"KEYS", b"RANDOMKEY") or \
                len(args) < 2 or args[1] not in keys:
            misses.append(line)
    return misses, scripts, scans


def test_done_mark_repair_scripts_touch_only_their_keys(cluster,
                                                        daemon_factory):
    """The repair's scripts, watched with MONITOR on every node while node
    1 is repaired from the others (_fill_bulk_marks: marks over several
    SCAN pages, held locks and a key of another type among them): every
    key a script of the daemon touches is one of the KEYS it was sent
    with, and the SCAN is a command of its own. A server that refuses
    undeclared keys (Dragonfly) has nothing to refuse; no redis-server
    here refuses them, so the node's own log of what each script did is
    the check."""
    d = daemon_factory.start(cluster, name="dk",
                             extra=["--quarantine-ms", "2000"])
    _fill_bulk_marks(cluster)
    mons = [_Monitor(nd) for nd in cluster.nodes[1:]]
    mark = len(d.stderr_text())
    cluster.nodes[0].restart()
    mons.insert(0, _Monitor(cluster.nodes[0]))
    _wait_log(d, r"node 1: restarted \(new run_id\)", 10.0 * SLOW, mark)
    _wait_quarantine_over(d, 0, 20.0 * SLOW)
    logs = [m.stop() for m in mons]
    assert len(cluster.nodes[0].cmd("KEYS", PREFIX + "lock:bulk-*")) == 700
    scripts = scans = 0
    for k, lines in enumerate(logs):
        misses, n, sc = _script_key_misses(lines)
        print("node %d: %d script call(s), %d SCAN(s), %d miss(es)"
              % (k + 1, n, sc, len(misses)))
        assert misses == [], (k + 1, misses[:5])
        scripts += n
        scans += sc
    # the repair ran: pages scanned, their marks read and copied
    assert scans >= 2 and scripts >= 2, (scans, scripts)


# -- what a quarantine counts, and fresh daemons ------------------------


def _quarantine_logged(cluster, daemon, k):
    mark = len(daemon.stderr_text())
    cluster.nodes[k].restart()
    m = _wait_log(daemon, r"node %d: restarted \(new run_id\) without "
                  r"persistence: quarantined for (\d+) ms" % (k + 1),
                  10.0 * SLOW, mark)
    return int(m.group(1))


def test_quarantine_counts_only_grants(cluster, daemon):
    """An extend of a day for a random token answers not_held: it granted
    nothing, so a restart after it is quarantined for the default 30 s,
    not for a day. A TTL that was granted (45 s) does count."""
    res = rname("g14")
    _wait_none_quarantined(daemon)
    with daemon.client() as c:
        r = c.call("extend", lock="0123456789abcdef" * 2, resource=res,
                   ttl_ms=86400000)
        assert_error(r, "not_held")
        q = _quarantine_logged(cluster, daemon, 2)
        print("quarantine after a day-long extend answered not_held: %d ms"
              % q)
        assert q == 30000, q
        r = c.call("acquire", resource=res, ttl_ms=45000)
        assert_ok(r, "acquire with node 3 quarantined")
        q = _quarantine_logged(cluster, daemon, 3)
        print("quarantine after a 45 s grant: %d ms" % q)
        assert q == 45000, q
        assert_ok(c.call("release", lock=r["lock"]))


def test_done_mark_repair_as_the_documented_acl_user(cluster,
                                                      daemon_factory):
    """The repair's SCAN runs as the least-privilege user that
    docs/operations.md documents: node 1 restarts (and gets the user back,
    as from an aclfile), and its mark is copied without a refusal in any
    node's ACL LOG."""
    import os

    from test_acl import USER, _acl_refusals, _acl_rules, _lock_down
    need_acl_channels(cluster.nodes)
    pw = "aclpw-%s" % os.urandom(8).hex()
    _lock_down(cluster, pw)
    args = []
    for nd in cluster.nodes:
        args += ["--node", "unix://%s:%s@%s" % (USER, pw, nd.path)]
    d = daemon_factory.start(cluster, name="dacl", extra=QUARANTINE,
                             node_args=args)
    res = rname("a14")
    key, mark = _complete_on_first_three(cluster, d, res, 600000)
    mark_seen = len(d.stderr_text())
    n1 = cluster.nodes[0]
    n1.restart()
    assert n1.cmd("ACL", "SETUSER", USER, *_acl_rules(pw)) == "OK"
    _wait_log(d, r"node 1: restarted \(new run_id\)", 15.0 * SLOW,
              mark_seen)
    _wait_quarantine_over(d, 0, 15.0 * SLOW)
    assert n1.cmd("GET", key) == mark
    # A reconnect may beat the user back to node 1: that AUTH failure is
    # the test's doing; a refused command would be the documented line's.
    refused = [e for e in _acl_refusals(cluster) if e[1] != b"auth"]
    print("ACL LOG entries other than AUTH: %r" % refused)
    assert refused == [], refused


def _uptime_s(node):
    info = node.cmd("INFO", "server").decode()
    return int(re.search(r"uptime_in_seconds:(\d+)", info).group(1))


def test_fresh_daemon_quarantines_a_node_started_later(cluster,
                                                       daemon_factory):
    """A daemon started after a node restarted has no earlier run_id to
    compare; it compares the nodes' start times (INFO uptime, README,
    "Fencing and restarts"). Node 2 restarts empty once the others have
    been up 5 s (past the 3 s the rule allows a cluster started together,
    plus uptime's 1 s resolution): a daemon started afterwards keeps it out
    for the rest of the period and locks on the other four; a daemon told
    that node 2 is persistent counts it at once."""
    ok, _ = poll_until(lambda: min(_uptime_s(nd) for nd in cluster.nodes)
                       >= 5, 15.0 * SLOW, 0.2)
    assert ok, [_uptime_s(nd) for nd in cluster.nodes]
    n2 = cluster.nodes[1]
    n2.restart()
    assert _uptime_s(n2) <= 1

    d = daemon_factory.start(cluster, name="dfresh",
                             extra=["--quarantine-ms", "60000"])

    def quarantined():
        return [bool(n.get("quarantined")) for n in _health_nodes(d)]
    ok, _ = poll_until(lambda: quarantined() == [False, True, False, False,
                                                 False], 5.0 * SLOW, 0.05)
    assert ok, "%r\n%s" % (_health_nodes(d), d.stderr_tail(20))
    _wait_log(d, r"node 2: started \d+ s after another node and has no "
              r"persistence: it may have lost locks; quarantined for "
              r"\d+ ms", 5.0 * SLOW)
    res = rname("fresh")
    with d.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=10000)
        assert_ok(r, "acquire on the four nodes that count")
        vals = cluster.get_all(lock_key(res))
        assert vals[1] is None, vals
        assert vals[0] == vals[2] == vals[3] == vals[4] == \
            r["lock"].encode(), vals
        assert_ok(c.call("release", lock=r["lock"]))

    # Persistent for real: a node said persistent with its AOF off is
    # quarantined all the same (test_node_config.py).
    n2.cmd("CONFIG", "SET", "appendonly", "yes")
    args = []
    for k, nd in enumerate(cluster.nodes):
        args += ["--node", nd.uri + ("?persistent=1" if k == 1 else "")]
    dp = daemon_factory.start(cluster, name="dfreshp",
                              extra=["--quarantine-ms", "60000"],
                              node_args=args)
    assert not any(n.get("quarantined") for n in _health_nodes(dp)), \
        _health_nodes(dp)
    assert "after another node" not in dp.stderr_text()


def _restart_three_and_pause_two(cluster):
    """Nodes 1-3 restart empty once every node has been up 5 s; nodes 4
    and 5, the older ones, keep their sockets but answer nothing."""
    ok, _ = poll_until(lambda: min(_uptime_s(nd) for nd in cluster.nodes)
                       >= 5, 15.0 * SLOW, 0.2)
    assert ok, [_uptime_s(nd) for nd in cluster.nodes]
    for nd in cluster.nodes[:3]:
        nd.restart()
    cluster.nodes[3].pause()
    cluster.nodes[4].pause()


def _wait_up(daemon, ks):
    ok, _ = poll_until(lambda: all(
        len(_health_nodes(daemon)) > k and
        _health_nodes(daemon)[k].get("up") is True for k in ks),
        10.0 * SLOW, 0.05)
    assert ok, "%r\n%s" % (_health_nodes(daemon), daemon.stderr_tail(20))


def test_fresh_daemon_young_nodes_wait_for_a_slow_older_node(cluster,
                                                              daemon_factory):
    """Three nodes restarted empty form a quorum by themselves. A daemon
    started afterwards compares start times only with the nodes it has
    seen, so while the two older nodes are still on their first handshake
    the young three must not count: they wait for that handshake, and once
    it shows them started later, they are quarantined."""
    _restart_three_and_pause_two(cluster)
    try:
        # A connect timeout (10 x the node timeout) far past the steps below.
        d = daemon_factory.start(cluster, name="dslow", wait_nodes=False,
                                 extra=["--quarantine-ms", "60000",
                                        "--node-timeout-ms", "3000"])
        _wait_up(d, [0, 1, 2])
        res = rname("young")
        with d.client() as c:
            r = c.call("acquire", resource=res, ttl_ms=10000)
            assert_error(r, "no_quorum")
            # Why, in the message: two nodes still on their first
            # handshake, three held back.
            assert r["error"]["message"].endswith(
                ": of 5 nodes, 2 down, 3 quarantined (restarted or "
                "emptied); see health"), r
        assert cluster.nodes[0].cmd("GET", lock_key(res)) is None
        assert [bool(n.get("quarantined")) for n in _health_nodes(d)][:3] \
            == [True, True, True], _health_nodes(d)
    finally:
        cluster.nodes[3].resume()
        cluster.nodes[4].resume()
    _wait_up(d, [3, 4])
    ok, _ = poll_until(lambda: [bool(n.get("quarantined")) for n in
                                _health_nodes(d)] ==
                       [True, True, True, False, False], 10.0 * SLOW, 0.05)
    assert ok, "%r\n%s" % (_health_nodes(d), d.stderr_tail(20))
    with d.client() as c:
        r = c.call("acquire", resource=rname("young"), ttl_ms=10000)
        assert_error(r, "no_quorum")
        assert r["error"]["message"].endswith(
            ": of 5 nodes, 3 quarantined (restarted or emptied); see "
            "health"), r


def test_fresh_daemon_young_nodes_count_when_the_older_never_answers(
        cluster, daemon_factory):
    """The wait is bounded by the first connection attempts: when the
    older nodes answer nothing within the connect timeout (2.5 s at the
    default node timeout), the daemon has nothing to compare with, and the
    young nodes count (README, "Fencing and restarts")."""
    _restart_three_and_pause_two(cluster)
    try:
        d = daemon_factory.start(cluster, name="dnever", wait_nodes=False,
                                 extra=["--quarantine-ms", "60000"])
        _wait_up(d, [0, 1, 2])
        res = rname("never")
        with d.client() as c:  # the lock lives as long as the connection
            def acquired():
                r = c.call("acquire", resource=res, ttl_ms=10000)
                return r if r.get("ok") else None
            r, _ = poll_until(acquired, 15.0 * SLOW, 0.2)
            assert r, "%r\n%s" % (_health_nodes(d), d.stderr_tail(20))
            assert [cluster.nodes[k].cmd("GET", lock_key(res))
                    for k in range(3)] == [r["lock"].encode()] * 3
        _wait_log(d, r"node\(s\) 4, 5 did not answer their first "
                  r"connection: node\(s\) 1, 2, 3, whose keys are recent \(a "
                  r"start without persistence, or a new data-set key\), count "
                  r"without being compared with them",
                  5.0 * SLOW)
    finally:
        cluster.nodes[3].resume()
        cluster.nodes[4].resume()
