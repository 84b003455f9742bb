"""The waiters' subscriber connections (wake.c, on node.c's connections)
keep deadlines: a connect that hangs is abandoned after the node connect
deadline, and an idle subscriber's heartbeat notices a node that stopped
answering without a reset. Both are read from the kernel's /proc/net/tcp,
which lists the daemon's sockets with their state and timers."""

import time

from blackhole import TCP_ESTABLISHED, TCP_SYN_SENT, BlackHole, tcp_sockets
from rl import (SLOW, RedisNode, Resp, assert_ok, lock_key,
                poll_until, rname)

def _wait_on_foreign_lock(cluster, d, nodes):
    """Sets a lock no daemon holds on `nodes`, and sends a waiting acquire
    for it: the daemon watches the resource, so its subscribers connect."""
    res = rname("wk")
    for n in nodes:
        with Resp(n.path) as r:
            r.cmd("SET", lock_key(res), "someone-else", "PX", "60000")
    c = d.client(timeout=30.0)
    c.send({"op": "acquire", "id": "w", "resource": res, "ttl_ms": 5000,
            "wait_ms": 20000})
    return c, res


def test_subscriber_connect_gives_up_at_its_deadline(cluster,
                                                     daemon_factory):
    """One node's address black-holes SYNs. The subscriber's connect to it
    must be abandoned after the connect deadline (1 s with
    --node-timeout-ms 100) and retried, not left hanging for the kernel's
    two minutes while that node's wake-ups are lost."""
    hole = BlackHole()
    try:
        node_args = []
        for n in cluster.nodes[:4]:
            node_args += ["--node", n.uri]
        node_args += ["--node", "redis://127.0.0.1:%d" % hole.port]
        d = daemon_factory.start(cluster, name="bh", wait_nodes=False,
                                 node_args=node_args,
                                 extra=["--node-timeout-ms", "100"])

        def four_up():
            ns = d.health().get("nodes") or []
            return len(ns) == 5 and sum(1 for n in ns if n["up"]) == 4
        assert poll_until(four_up, 10.0 * SLOW)[0], d.health()

        c, _ = _wait_on_foreign_lock(cluster, d, cluster.nodes[:4])
        try:
            ours = hole.own_ports()
            first, last = {}, {}
            t0 = time.monotonic()
            window = 5.0
            for _ in range(int(window / 0.05) + 100):
                now = time.monotonic() - t0
                if now >= window:
                    break
                for port, (state, _) in tcp_sockets(hole.port).items():
                    if state == TCP_SYN_SENT and port not in ours:
                        first.setdefault(port, now)
                        last[port] = now
                time.sleep(0.05)
            lives = sorted(last[p] - first[p] for p in first)
            print("connects to the black hole seen: %d, longest %.2f s"
                  % (len(lives), lives[-1] if lives else 0.0))
            assert len(lives) >= 4, "too few connect attempts: %r" % lives
            # 1 s deadline; the slack covers a loaded (or valgrind) machine
            assert lives[-1] < 1.0 + 1.5 * SLOW, \
                "a connect outlived its deadline: %r" % lives
            assert d.alive()
        finally:
            c.close()
    finally:
        hole.close()


def test_idle_subscriber_notices_a_frozen_node(cluster, daemon_factory):
    """An idle subscriber has nothing to send; the subscriber connections
    are node.c's, whose heartbeat (PING every idle second) and stall rule
    drop a connection whose node stopped answering. With the TCP node
    SIGSTOPped (its kernel keeps the sockets open, so no reset comes),
    every socket of the daemon to it, the subscriber's included, must
    leave ESTABLISHED within seconds (keepalive alone would take 15 s or
    more)."""
    tcp = RedisNode(cluster.dir, 9, tcp_port="free")
    tcp.start()
    try:
        node_args = []
        for n in cluster.nodes[:4]:
            node_args += ["--node", n.uri]
        node_args += ["--node", tcp.uri]
        d = daemon_factory.start(cluster, name="ka", node_args=node_args)
        c, _ = _wait_on_foreign_lock(cluster, d, cluster.nodes[:4] + [tcp])
        try:
            def lock_and_sub():
                est = [p for p, (st, _) in tcp_sockets(tcp.tcp_port).items()
                       if st == TCP_ESTABLISHED]
                return est if len(est) == 2 else None
            est, _ = poll_until(lock_and_sub, 5.0 * SLOW)
            assert est, tcp_sockets(tcp.tcp_port)
            tcp.pause()
            try:
                def all_left():
                    now = tcp_sockets(tcp.tcp_port)
                    return all(now.get(p, (0, 0))[0] != TCP_ESTABLISHED
                               for p in est)
                left, secs = poll_until(all_left, 10.0 * SLOW)
                print("sockets %r left ESTABLISHED after %.1f s" % (est,
                                                                   secs))
                assert left, tcp_sockets(tcp.tcp_port)
            finally:
                tcp.resume()
            assert d.alive()
        finally:
            c.close()
    finally:
        tcp.stop()


def test_subscribe_refusal_logged_once_per_node(cluster, daemon_factory):
    """An ACL user without the wake channels: every SUBSCRIBE is refused.
    The daemon says so once per node, not once per waiter."""
    import os
    pw = "wk-%s" % os.urandom(6).hex()
    admin = "adm-%s" % os.urandom(6).hex()
    for n in cluster.nodes:
        assert n.cmd("ACL", "SETUSER", "redlockd", "on", ">" + pw, "~*",
                     "resetchannels", "+@all") == "OK"
        assert n.cmd("ACL", "SETUSER", "default", "resetpass",
                     ">" + admin) == "OK"
        n.password = admin
    node_args = []
    for n in cluster.nodes:
        node_args += ["--node", "unix://redlockd:%s@%s" % (pw, n.path)]
    d = daemon_factory.start(cluster, name="nochan", node_args=node_args)
    clients = []
    try:
        for _ in range(3):
            res = rname("nochan")
            for n in cluster.nodes:
                n.cmd("SET", lock_key(res), "someone-else", "PX", "60000")
            c = d.client(timeout=30.0)
            c.send({"op": "acquire", "id": "w", "resource": res,
                    "ttl_ms": 5000, "wait_ms": 20000})
            clients.append(c)

        def refused():
            lines = [ln for ln in d.stderr_text().splitlines()
                     if "SUBSCRIBE refused" in ln]
            return lines if len(lines) >= 5 else None
        lines, _ = poll_until(refused, 5.0 * SLOW)
        assert lines, d.stderr_tail(40)
        time.sleep(0.5)
        lines = [ln for ln in d.stderr_text().splitlines()
                 if "SUBSCRIBE refused" in ln]
        print(lines[0])
        assert len(lines) == 5, lines
        assert "NOPERM" in lines[0], lines[0]
        assert pw not in d.stderr_text()
    finally:
        for c in clients:
            c.close()
