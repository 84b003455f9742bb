"""test_noscript_order.py: a NOSCRIPT recovery keeps the order of a node's
connection.

After SCRIPT FLUSH on a node, every EVALSHA there answers NOSCRIPT and the
daemon sends it again as EVAL. An acquire that lost its round is undone by
a rollback sent behind it; if the acquire is re-sent after the rollback
already ran, its key stays on that node for the whole TTL.

The interleaving is made deterministic with a gate in front of nodes 4
and 5: a loopback TCP proxy that forwards the daemon's commands at once
but holds the node's replies until the test lets them through.
"""

import random
import socket
import threading
import time

import pytest

from rl import (assert_ok, err_code, lock_key, poll_until,
                rname, resp_cmd, SLOW)


class Gate:
    """127.0.0.1:port -> a redis-server unix socket. Commands pass at once
    (and are recorded); replies wait while the gate is shut, except the
    bytes let through with release()."""

    def __init__(self, upstream_path):
        self.upstream = str(upstream_path)
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(8)
        self.port = self.lsock.getsockname()[1]
        self.cv = threading.Condition()
        self.open = True
        self.allow = 0          # reply bytes that may pass while shut
        self.held = b""         # replies not yet passed (first connection)
        self.sent = b""         # commands seen (first connection)
        self.conns = []
        self.closed = False
        self.threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self.threads.append(t)

    @property
    def uri(self):
        return "redis://127.0.0.1:%d" % self.port

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                u.connect(self.upstream)
            except OSError:
                c.close()
                continue
            first = not self.conns
            self.conns += [c, u]
            for fn in (self._up, self._down):
                t = threading.Thread(target=fn, args=(c, u, first),
                                     daemon=True)
                t.start()
                self.threads.append(t)

    def _up(self, c, u, first):
        while True:
            try:
                data = c.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            if first:
                with self.cv:
                    self.sent += data
                    self.cv.notify_all()
            try:
                u.sendall(data)
            except OSError:
                break
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _down(self, c, u, first):
        if not first:  # only the node connection is gated
            while True:
                try:
                    data = u.recv(65536)
                    if not data:
                        break
                    c.sendall(data)
                except OSError:
                    break
            return
        reader = threading.Thread(target=self._read_replies, args=(u,),
                                  daemon=True)
        reader.start()
        self.threads.append(reader)
        while True:
            with self.cv:
                while not self.closed and not (
                        self.held and (self.open or self.allow > 0)) and \
                        self.held is not None:
                    self.cv.wait(0.1)
                if self.closed or self.held is None:
                    return
                n = len(self.held) if self.open else min(self.allow,
                                                         len(self.held))
                out, self.held = self.held[:n], self.held[n:]
                if not self.open:
                    self.allow -= n
            try:
                c.sendall(out)
            except OSError:
                return

    def _read_replies(self, u):
        while True:
            try:
                data = u.recv(65536)
            except OSError:
                data = b""
            with self.cv:
                if not data:
                    if not self.held:
                        self.held = None
                    self.cv.notify_all()
                    return
                self.held += data
                self.cv.notify_all()

    def shut(self):
        with self.cv:
            self.open = False
            self.allow = 0

    def wait_held(self, pred, timeout):
        """Until pred(held bytes) is true."""
        deadline = time.monotonic() + timeout
        with self.cv:
            while not pred(self.held or b""):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cv.wait(left)
            return True

    def release_first_line(self):
        """Lets exactly the first held reply through; it must be a one-line
        reply (an error such as NOSCRIPT)."""
        with self.cv:
            i = self.held.find(b"\r\n")
            assert i >= 0, self.held
            self.allow = i + 2
            self.cv.notify_all()

    def sent_count(self, needle):
        with self.cv:
            return self.sent.count(needle)

    def reopen(self):
        with self.cv:
            self.open = True
            self.cv.notify_all()

    def close(self):
        with self.cv:
            self.closed = True
            self.open = True
            self.cv.notify_all()
        for s in [self.lsock] + self.conns:
            try:
                s.close()
            except OSError:
                pass


def test_rollback_after_noscript_removes_the_key(cluster, daemon_factory):
    n4, n5 = cluster.nodes[3], cluster.nodes[4]
    g4, g5 = Gate(n4.path), Gate(n5.path)
    try:
        nodes = []
        for nd in cluster.nodes[:3]:
            nodes += ["--node", nd.uri]
        nodes += ["--node", g4.uri, "--node", g5.uri]
        # A node timeout far above the time the gates stay shut: a command
        # that timed out is never re-sent, which would hide the bug.
        # The acquire as a script (Redis < 7.0), which can meet NOSCRIPT;
        # on 7.0 it is a SET, and only the rollback is a script.
        d = daemon_factory.start(cluster, name="dns", node_args=nodes,
                                 extra=["--node-timeout-ms", "8000",
                                        "--acquire-script"])
        r1, r2 = rname("first"), rname("undone")
        k2 = lock_key(r2)
        # R2 is held by someone else on nodes 1, 2 and 4: the acquire of R2
        # below cannot win, and node 4's answer is what decides it.
        for nd in (cluster.nodes[0], cluster.nodes[1], n4):
            assert resp_cmd(nd.path, "SET", k2, "someone-else",
                            "PX", 60000) == "OK"
        assert resp_cmd(n5.path, "SCRIPT", "FLUSH") == "OK"
        g4.shut()
        g5.shut()
        with d.client(timeout=10.0 * SLOW) as c:
            # 1. Wins on nodes 1-3; on node 5 it meets NOSCRIPT (held).
            assert_ok(c.call("acquire", resource=r1, ttl_ms=60000))
            assert g5.wait_held(lambda b: b.startswith(b"-NOSCRIPT"),
                                5.0 * SLOW)
            # 2. Undecided: node 3 says ok, nodes 1 and 2 busy, 4 and 5
            # held. On node 5 this EVALSHA runs (NOSCRIPT) behind the
            # first one.
            c.send({"op": "acquire", "id": "a2", "resource": r2,
                    "ttl_ms": 60000})
            assert g5.wait_held(lambda b: b.count(b"-NOSCRIPT") == 2,
                                5.0 * SLOW)
            # 3. The first NOSCRIPT reaches the daemon: it may re-send and
            # reload now, but the second acquire is already on the wire.
            loads = g5.sent_count(b"SCRIPT")
            g5.release_first_line()
            poll_until(lambda: g5.sent_count(b"SCRIPT") > loads, 0.5 * SLOW)
            # 4. Node 4 says busy: the round is lost and the rollback goes
            # to nodes 3 and 5 (whose answer is still out).
            evalshas = g5.sent_count(b"EVALSHA")
            g4.reopen()
            rsp = c.read_msg()
            assert err_code(rsp) == "busy", rsp
            # The rollback was written at once (old code), or is held
            # until node 5 has answered the acquire (fixed code).
            poll_until(lambda: g5.sent_count(b"EVALSHA") > evalshas,
                       0.5 * SLOW)
            # 5. Node 5 answers the rest.
            g5.reopen()
            # The first acquire was re-sent and holds R1 on node 5 too.
            ok, _ = poll_until(
                lambda: resp_cmd(n5.path, "GET", lock_key(r1)) is not None,
                5.0 * SLOW)
            assert ok, "the first acquire was not re-sent on node 5"
            # Whatever the second acquire set on node 5 has been rolled
            # back: no key of ours is left there.
            gone, _ = poll_until(
                lambda: resp_cmd(n5.path, "GET", k2) is None, 2.0 * SLOW)
            assert gone, (
                "a failed acquire's key stays on node 5: %r (pttl %r)" %
                (resp_cmd(n5.path, "GET", k2), resp_cmd(n5.path, "PTTL", k2)))
            # The node keeps working with EVALSHA after the reload.
            r3 = rname("after")
            assert_ok(c.call("acquire", resource=r3, ttl_ms=5000))
            ok, _ = poll_until(
                lambda: resp_cmd(n5.path, "GET", lock_key(r3)) is not None,
                2.0 * SLOW)
            assert ok
    finally:
        g4.reopen()
        g5.reopen()
        daemon_factory.teardown([])
        g4.close()
        g5.close()


def test_acquire_not_resent_after_a_later_command_ran(cluster,
                                                      daemon_factory):
    """Another client (here a second daemon) loads the scripts between our
    acquire, which met NOSCRIPT, and the release sent behind it, which
    therefore ran: the acquire must not run after it."""
    n5 = cluster.nodes[4]
    g5 = Gate(n5.path)
    try:
        nodes = []
        for nd in cluster.nodes[:4]:
            nodes += ["--node", nd.uri]
        nodes += ["--node", g5.uri]
        # The acquire as a script (Redis < 7.0), which can meet NOSCRIPT;
        # on 7.0 it is a SET, and only the rollback is a script.
        d = daemon_factory.start(cluster, name="dg", node_args=nodes,
                                 extra=["--node-timeout-ms", "8000",
                                        "--acquire-script"])
        r1 = rname("late")
        assert resp_cmd(n5.path, "SCRIPT", "FLUSH") == "OK"
        g5.shut()
        with d.client(timeout=10.0 * SLOW) as c:
            rsp = c.call("acquire", resource=r1, ttl_ms=60000)
            assert_ok(rsp)
            assert g5.wait_held(lambda b: b.startswith(b"-NOSCRIPT"),
                                5.0 * SLOW)
            # A second daemon's handshake loads the scripts on node 5.
            daemon_factory.start(cluster, name="d2")
            sent = g5.sent_count(b"EVALSHA")
            assert_ok(c.call("release", lock=rsp["lock"]))
            ok, _ = poll_until(lambda: g5.sent_count(b"EVALSHA") > sent,
                               2.0 * SLOW)
            assert ok, "the release was not written to node 5"
            g5.reopen()
            # The release ran on node 5 before the acquire was answered.
            # Had the acquire been re-sent, its key would stay 60 s.
            time.sleep(0.3 * SLOW)
            gone, _ = poll_until(
                lambda: resp_cmd(n5.path, "GET", lock_key(r1)) is None,
                1.0 * SLOW)
            assert gone, "the released lock's key stays on node 5: pttl %r" % (
                resp_cmd(n5.path, "PTTL", lock_key(r1)),)
            r2 = rname("after")
            assert_ok(c.call("acquire", resource=r2, ttl_ms=5000))
            ok, _ = poll_until(
                lambda: resp_cmd(n5.path, "GET", lock_key(r2)) is not None,
                2.0 * SLOW)
            assert ok, "node 5 does not take acquires after the recovery"
        assert "not re-sent" in d.stderr_text()
    finally:
        g5.reopen()
        daemon_factory.teardown([])
        g5.close()


@pytest.mark.parametrize("extra", [(), ("--acquire-script",)],
                         ids=["native", "script"])
def test_flushes_under_load_leave_no_keys(cluster, daemon_factory, extra):
    """Two daemons, contending clients, and SCRIPT FLUSH on random nodes
    every few ms, for a bounded time: exclusion holds, and once every
    client has released, no lock key is left on any node (a failed
    acquire's rollback or a release that ran before the acquire it undoes
    would leave one for the whole 30 s TTL). Each write of acquires ends
    with a GET of the data-set mark whose reply the acquires wait for:
    that wait must neither block the recovery (the mark's GET goes out
    ahead of the commands it holds back) nor be lost for an acquire sent
    again as EVAL."""
    daemons = [daemon_factory.start(cluster, name="f%d" % i,
                                    extra=list(extra))
               for i in range(2)]
    resources = [rname("flush") for _ in range(3)]
    holders = {r: None for r in resources}
    mu = threading.Lock()
    stop = threading.Event()
    errors = []
    counts = {"ok": 0, "other": 0}

    def worker(k):
        rnd = random.Random(k)
        with daemons[k % 2].client(timeout=10.0 * SLOW) as c:
            for _ in range(100000):
                if stop.is_set():
                    return
                res = rnd.choice(resources)
                r = c.call("acquire", resource=res, ttl_ms=30000)
                if r.get("ok") is not True:
                    with mu:
                        counts["other"] += 1
                    continue
                with mu:
                    if holders[res] is not None:
                        errors.append("%s held by %s and %s" % (
                            res, holders[res], k))
                    holders[res] = k
                    counts["ok"] += 1
                time.sleep(rnd.random() * 0.002)
                with mu:
                    holders[res] = None
                rel = c.call("release", lock=r["lock"])
                if rel.get("ok") is not True:
                    errors.append("release: %r" % (rel,))

    def flusher():
        rnd = random.Random(7)
        for _ in range(100000):
            if stop.is_set():
                return
            nd = rnd.choice(cluster.nodes)
            try:
                resp_cmd(nd.path, "SCRIPT", "FLUSH")
            except OSError:
                pass
            time.sleep(0.003)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    threads.append(threading.Thread(target=flusher))
    for t in threads:
        t.start()
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[:5]
    assert counts["ok"] > 0, counts
    # Rollbacks and releases to a node may still be on their way.
    poll_until(
        lambda: (lambda k: None if any(k) else k)(cluster.lock_keys_all()),
        3.0 * SLOW, 0.05)
    keys = cluster.lock_keys_all()
    assert not any(keys), "keys left behind: %r (counts %r)" % (keys, counts)
