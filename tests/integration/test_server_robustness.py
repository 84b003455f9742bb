"""server.c robustness: shutdown with node commands still pending (a
timed-out drain, a second signal), pipelined HTTP input while a request is
busy (bounded input, answers in order, no recursion per request), and long
runs of whitespace before the first byte that picks the framing, and input
that waited behind a paused connection, which is read on a later loop turn
than the answer that let it go (never from inside that answer)."""

import select
import signal
import socket
import subprocess
import time

import pytest

from extra import HttpConn, metric, scrape, wait_metric
from rl import (SLOW, Client, Closed, assert_ok, exit_meaning, lock_key,
                poll_until, rname)

PING = HttpConn.build("GET", "/v1/ping")[0]


# -- shutdown with node commands pending -------------------------------------


def _acquire_in_flight(cluster, d, c, res):
    """Sends an acquire that the paused majority keeps in flight; returns
    once the running nodes hold its key (so the daemon sent it)."""
    c.send({"op": "acquire", "id": "inflight", "resource": res,
            "ttl_ms": 60000})
    running = [nd for nd in cluster.nodes if not nd.paused]

    def sent():
        return all(nd.cmd("GET", lock_key(res)) is not None
                   for nd in running)
    ok, _ = poll_until(sent, 10.0 * SLOW, 0.02)
    assert ok, "the acquire never reached the running nodes"
    assert d.alive()


def _answer_or_eof(c, timeout):
    """The client gets an answer or its connection closed, in time."""
    try:
        lines = c.read_until_closed(timeout)
    except socket.timeout as e:
        raise AssertionError("client neither answered nor closed: %s" % e)
    print("client saw %r then EOF" % lines[:3])


def _wait_exit(d, timeout):
    try:
        code = d.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    d.exit_code = code
    return code


def _pending_daemon(cluster, daemon_factory, name, shutdown_ms):
    # The long node timeout keeps the paused nodes' commands pending past
    # the drain.
    return daemon_factory.start(
        cluster, name=name,
        extra=["--node-timeout-ms", "30000",
               "--shutdown-timeout-ms", str(shutdown_ms)])


def test_drain_timeout_with_commands_pending(cluster, daemon_factory):
    d = _pending_daemon(cluster, daemon_factory, "pend", 500)
    c = d.client(timeout=10.0)
    try:
        for nd in cluster.nodes[:3]:
            nd.pause()
        _acquire_in_flight(cluster, d, c, rname("pend"))
        d.proc.send_signal(signal.SIGTERM)
        code = _wait_exit(d, 10.0 * SLOW)
        assert code == 0, "exit %r%s after SIGTERM with commands pending; " \
            "stderr:\n%s" % (code, exit_meaning(code), d.stderr_tail(60))
        _answer_or_eof(c, 5.0 * SLOW)
    finally:
        c.close()
        cluster.resume_all()
        d.stop()


def test_second_signal_with_commands_pending(cluster, daemon_factory):
    d = _pending_daemon(cluster, daemon_factory, "sig2", 60000)
    c = d.client(timeout=10.0)
    try:
        for nd in cluster.nodes[:3]:
            nd.pause()
        _acquire_in_flight(cluster, d, c, rname("sig2"))
        d.proc.send_signal(signal.SIGTERM)
        # The first signal was handled once the socket file is gone.
        gone, _ = poll_until(lambda: not d.socket.exists(), 10.0 * SLOW)
        assert gone, "socket file still there after SIGTERM"
        assert d.alive(), "exited before the second signal"
        d.proc.send_signal(signal.SIGINT)
        code = _wait_exit(d, 10.0 * SLOW)
        assert code == 0, "exit %r%s after a second signal; stderr:\n%s" % (
            code, exit_meaning(code), d.stderr_tail(60))
        _answer_or_eof(c, 5.0 * SLOW)
    finally:
        c.close()
        cluster.resume_all()
        d.stop()


# -- pipelined HTTP while a request is busy ----------------------------------


def _busy_waiter(d, res, holder):
    """An HTTP connection whose acquire waits on res (held by holder)."""
    held = holder.call("acquire", resource=res, ttl_ms=60000)
    assert_ok(held, "holder")
    h = HttpConn(d.socket, timeout=10.0 * SLOW)
    head, body = HttpConn.build("POST", "/v1/locks",
                                {"resource": res, "ttl_ms": 10000,
                                 "wait_ms": 120000})
    h.send_raw(head + body)
    v, _ = wait_metric(d.socket, "redlockd_waiters", 1, 5.0 * SLOW)
    assert v == 1, "the HTTP acquire is not waiting: waiters %r" % v
    return h, held


def test_pipelined_http_behind_busy_request_in_order(cluster, daemon):
    """3000 pings pipelined behind a waiting acquire: once it is granted,
    every ping is answered, in order, and the daemon lives."""
    res = rname("hpipe")
    with daemon.client() as holder:
        h, held = _busy_waiter(daemon, res, holder)
        with h:
            h.send_raw(PING * 3000)
            assert_ok(holder.call("release", lock=held["lock"]))
            r = h.read_response(10.0 * SLOW)
            assert r.status == 200, r
            assert r.json()["resource"] == res, r
            tok = r.json()["lock"]
            for i in range(3000):
                r = h.read_response(10.0 * SLOW)
                assert r.status == 200 and r.json() == {"ok": True}, (i, r)
            # The connection is still served, reading again.
            r = h.request("DELETE", "/v1/locks/" + tok)
            assert r.status == 200, r
    assert daemon.alive(), "daemon died: %s" % daemon.stderr_tail(40)


def _send_until_blocked(sock, data, limit, idle):
    """Non-blocking sends of data, again and again, until the socket stays
    unwritable for idle seconds or limit bytes went out. Returns bytes
    sent."""
    sock.setblocking(False)
    total = 0
    try:
        for _ in range(limit // 1024 + 100):
            if total >= limit:
                break
            _, w, _ = select.select([], [sock], [], idle)
            if not w:
                break
            try:
                total += sock.send(data)
            except BlockingIOError:
                continue
    finally:
        sock.setblocking(True)
        sock.settimeout(10.0 * SLOW)
    return total


def test_pipelined_http_input_bounded_while_busy(cluster, daemon):
    """While a request is answered the daemon stops taking more pipelined
    input once it holds a request's worth (--max-line-bytes): the client
    meets back-pressure instead of the daemon's memory growing."""
    res = rname("hbound")
    with daemon.client() as holder:
        h, held = _busy_waiter(daemon, res, holder)
        with h:
            chunk = PING * 2000  # 68 KB
            sent = _send_until_blocked(h.sock, chunk, 16 * 1024 * 1024,
                                       1.0 * SLOW)
            print("the daemon took %d bytes while the request was busy"
                  % sent)
            assert sent < 2 * 1024 * 1024, (
                "%d bytes of pipelined input taken while busy" % sent)
            assert daemon.alive()
            # Granted: the acquire is answered first, then the pings.
            assert_ok(holder.call("release", lock=held["lock"]))
            r = h.read_response(10.0 * SLOW)
            assert r.status == 200 and r.json()["resource"] == res, r
            for i in range(100):
                r = h.read_response(10.0 * SLOW)
                assert r.status == 200 and r.json() == {"ok": True}, (i, r)
    with daemon.client() as c:
        assert_ok(c.call("ping"))
    assert metric(scrape(daemon.socket), "redlockd_waiters") == 0


# -- whitespace before the framing byte --------------------------------------


def test_ndjson_after_long_whitespace(daemon_mod):
    for n in (10, 63, 64, 65, 100, 1000, 40000):
        with daemon_mod.client(timeout=5.0 * SLOW) as c:
            c.send_raw(b" \t\r\n" * (n // 4) + b" " * (n % 4) +
                       b'{"op":"ping","id":%d}\n' % n)
            rsp = c.read_msg()
            assert rsp.get("id") == n, rsp
            assert_ok(rsp, "ping after %d whitespace bytes" % n)


def test_ndjson_whitespace_in_pieces(daemon_mod):
    with daemon_mod.client(timeout=5.0 * SLOW) as c:
        c.send_raw(b" " * 100)
        time.sleep(0.05)
        c.send_raw(b"\n" * 70)
        time.sleep(0.05)
        c.send_raw(b'{"op":"ping","id":"p"}\n')
        rsp = c.read_msg()
        assert rsp.get("id") == "p", rsp
        assert_ok(rsp)


def test_http_after_long_whitespace(daemon_mod):
    for n in (100, 5000):
        with HttpConn(daemon_mod.socket, timeout=5.0 * SLOW) as h:
            h.send_raw(b"\r\n" * n + PING)
            r = h.read_response()
            assert r.status == 200 and r.json() == {"ok": True}, r


def test_whitespace_only_then_close(daemon_mod):
    """Whitespace alone never picks a framing nor grows: the daemon keeps
    serving, and closes when the peer does."""
    with daemon_mod.client(timeout=5.0 * SLOW) as c:
        c.send_raw(b" " * 100000)
        c.sock.shutdown(socket.SHUT_WR)
        try:
            c.read_until_closed(5.0 * SLOW)
        except (Closed, socket.timeout) as e:
            raise AssertionError("no close after whitespace and EOF: %s" % e)
    with Client(daemon_mod.socket, timeout=5.0 * SLOW) as c:
        assert_ok(c.call("ping"))


# -- input that waited behind answers ----------------------------------------


def _waiters_then_garbage(d, res):
    """With --max-inflight 2, a connection sends two waiting acquires for a
    held resource and then a line that is not JSON: reading stops after the
    two, and the bad line waits in the buffer for the first answer."""
    x = d.client(timeout=10.0)
    x.send_raw(b"".join(
        b'{"op":"acquire","id":"%s","resource":"%s","ttl_ms":5000,'
        b'"wait_ms":%d}\n' % (i.encode(), res.encode(), w)
        for i, w in (("A", 60000), ("B", 500))) + b"not json\n")
    return x


@pytest.mark.parametrize("how", ["waiter_times_out", "waiter_wins",
                                 "shutdown"])
def test_bad_line_behind_waiters(cluster, daemon_factory, how):
    """The first waiter's answer lets reading resume; the bad line then
    closes the connection and abandons its other waiter on the same wait
    queue. Handled inside the answer, that freed the queue under the code
    answering (a crash; a use-after-free under ASan)."""
    d = daemon_factory.start(cluster, name="wq",
                             extra=["--max-inflight", "2"])
    res = rname("wq")
    with d.client() as h, d.client() as other:
        held = h.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(held)
        kept = other.call("acquire", resource=rname("kept"), ttl_ms=20000)
        assert_ok(kept)
        x = _waiters_then_garbage(d, res)
        try:
            time.sleep(0.3 * SLOW)
            if how == "waiter_wins":
                assert_ok(h.call("release", lock=held["lock"]))
            if how == "shutdown":
                code, secs = d.stop(10.0)
                assert code == 0, "SIGTERM gave %r%s" % (code,
                                                        exit_meaning(code))
                return
            lines = x.read_until_closed(5.0 * SLOW)
            print("the waiting connection got: %r" % lines)
            assert any(b"bad_request" in ln for ln in lines), lines
            assert d.alive(), d.stderr_tail()
            # Nobody else lost anything.
            assert_ok(other.call("extend", lock=kept["lock"]))
            assert_ok(h.call("ping"))
        finally:
            x.close()
