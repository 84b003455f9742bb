"""The fencing write-back when nodes vanish between winning the round and
raising the counter: the answer must come at once (no_quorum, rolled back),
never hang. Small unix-socket proxies in front of real redis-servers make
the timing exact: one node answers the acquisition and then drops its
connection, another answers it late."""

import os
import socket
import threading
import time

from rl import SLOW, assert_error, lock_key, poll_until, rname


class NodeProxy:
    """Forwards one unix socket to a redis-server's. Once armed, the first
    EVALSHA the daemon sends decides the fault: 'drop' forwards its reply,
    then closes the connection and refuses every later one; 'delay' holds
    its reply for delay_s."""

    def __init__(self, path, target, mode, delay_s=0.0):
        self.path, self.target = str(path), str(target)
        self.mode, self.delay_s = mode, delay_s
        self.armed = False
        self.tripped = threading.Event()
        self.stopping = False
        self.lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lsock.bind(self.path)
        self.lsock.listen(16)
        self.lsock.settimeout(0.2)
        self.socks = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.mode == "drop" and self.tripped.is_set():
                c.close()  # the node stays unreachable
                continue
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.connect(self.target)
            self.socks += [c, u]
            state = {"eval": False}
            for src, dst, up in ((c, u, True), (u, c, False)):
                t = threading.Thread(target=self._pump,
                                     args=(src, dst, up, state, c, u),
                                     daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src, dst, upstream, state, c, u):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upstream:
                    # the acquire: MULTI (SET NX GET, INCR) on Redis
                    # 7, the script before
                    if self.armed and (b"EVALSHA" in data or
                                       b"MULTI" in data):
                        state["eval"] = True
                    dst.sendall(data)
                    continue
                fault = state["eval"] and not self.tripped.is_set()
                if fault and self.mode == "delay":
                    self.tripped.set()
                    time.sleep(self.delay_s)
                dst.sendall(data)
                if fault and self.mode == "drop":
                    self.tripped.set()
                    break
        except OSError:
            pass
        for s in (c, u):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.stopping = True
        for s in [self.lsock] + self.socks:
            try:
                s.close()
            except OSError:
                pass
        for t in self.threads:
            t.join(timeout=2.0)
        try:
            os.unlink(self.path)
        except OSError:
            pass


def test_fence_writeback_lost_before_sending_answers(cluster,
                                                     daemon_factory):
    """Three nodes, the third down. n1 answers the acquisition and drops;
    n2 answers late, which wins the round; the write-back can then reach
    only n2, so it is lost before any answer could come back. The client
    must get no_quorum at once and n2's key must be rolled back."""
    n1, n2, n3 = cluster.nodes[:3]
    n3.kill9()
    p1 = NodeProxy(cluster.dir / "px1.sock", n1.path, "drop")
    p2 = NodeProxy(cluster.dir / "px2.sock", n2.path, "delay",
                   delay_s=0.5 * SLOW)
    try:
        d = daemon_factory.start(
            cluster, name="fw", wait_nodes=False,
            node_args=["--node", "unix://%s" % p1.path,
                       "--node", "unix://%s" % p2.path,
                       "--node", n3.uri],
            extra=["--node-timeout-ms", str(int(5000 * SLOW))])

        def two_up():
            ns = d.health().get("nodes") or []
            return len(ns) == 3 and ns[0]["up"] and ns[1]["up"]
        ok, _ = poll_until(two_up, 10.0 * SLOW, 0.05)
        assert ok, d.health()
        p1.armed = p2.armed = True
        res = rname("fw")
        t0 = time.monotonic()
        with d.client(timeout=10.0 * SLOW) as c:
            r = c.call("acquire", resource=res, ttl_ms=30000, fence=True)
        took = time.monotonic() - t0
        print("answer after %.2fs: %r" % (took, r))
        assert p1.tripped.is_set() and p2.tripped.is_set(), (
            "the faults did not fire: the test did not test anything")
        assert_error(r, "no_quorum")
        # The rollback reached the node that held the key and is up.
        ok, _ = poll_until(lambda: n2.cmd("GET", lock_key(res)) is None,
                           5.0 * SLOW, 0.05)
        assert ok, "n2 still holds %r" % n2.cmd("GET", lock_key(res))
        # Nothing is left in flight: SIGTERM drains at once (a forgotten op
        # would hold the shutdown to its timeout and log it).
        code, secs = d.stop(10.0 * SLOW)
        print("SIGTERM: exit %r after %.2fs" % (code, secs))
        assert code == 0, d.stderr_tail(40)
        assert "timed out waiting" not in d.stderr_tail(200), \
            d.stderr_tail(40)
    finally:
        p1.close()
        p2.close()
