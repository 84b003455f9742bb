"""test_http_edges.py: edges of the HTTP side of the daemon.

- The --metrics-listen TCP port has its own small connection cap and an
  idle deadline: idle peers there never use up --max-connections of the
  lock socket, and a connection that completes no request is closed.
- A client that pipelines HTTP requests and then half-closes gets every
  answer, in order, even when the first one is answered late (NDJSON too,
  with the rest of the pipeline held back by --max-inflight).
- HEAD answered with an error (404, 405, 400, the metrics listener's 404)
  carries the head only, so a keep-alive client stays in step.

Unix sockets and 127.0.0.1 only; every wait is bounded (scaled by SLOW).
"""

import json
import socket
import time

from extra import HttpConn, _parse_head, free_port, http, parse_one, \
    parse_responses
from rl import SLOW, Client, assert_ok, rname

# sidecar/server.c: METRICS_MAX_CONNECTIONS; sidecar/client.h: METRICS_IDLE_MS.
METRICS_CAP = 16
METRICS_IDLE_S = 5.0
# How long past the deadline a close may take to be seen.
CLOSE_SLACK_S = 3.0 * SLOW


def read_until_eof(sock, timeout):
    """(bytes read, whether the peer closed) within timeout seconds."""
    deadline = time.monotonic() + timeout
    data = b""
    for _ in range(100000):
        left = deadline - time.monotonic()
        if left <= 0:
            return data, False
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


def unix_ping(d, timeout):
    """The answer to one NDJSON ping on a fresh unix connection (a refused
    connection answers with an error line and no id)."""
    with Client(d.socket, timeout=timeout) as c:
        c.send({"op": "ping", "id": "p"})
        return c.read_msg(timeout)


# -- 1. metrics listener: own cap, idle deadline ----------------------------


def test_idle_metrics_connections_leave_the_lock_socket_alone(
        cluster, daemon_factory):
    port = free_port()
    d = daemon_factory.start(
        cluster, name="mcap",
        extra=["--max-connections", "3",
               "--metrics-listen", "127.0.0.1:%d" % port])
    addr = ("127.0.0.1", port)
    idle = []
    try:
        t_open = time.monotonic()
        for _ in range(METRICS_CAP + 4):
            idle.append(socket.create_connection(addr, timeout=5.0 * SLOW))
        time.sleep(0.5 * SLOW)  # the daemon accepts them all first

        # Every slot of the lock socket is still free: three at once.
        clients = [Client(d.socket, timeout=5.0 * SLOW) for _ in range(3)]
        try:
            for i, c in enumerate(clients):
                c.send({"op": "ping", "id": i})
                r = c.read_msg(5.0 * SLOW)
                assert r.get("ok") is True, (
                    "unix client %d with %d idle metrics connections open: "
                    "%r" % (i, len(idle), r))
            res = rname("mcap")
            r = clients[0].call("acquire", resource=res, ttl_ms=5000,
                                timeout=5.0 * SLOW)
            assert_ok(r, "acquire with idle metrics connections open")
            assert_ok(clients[0].call("release", lock=r["lock"],
                                      timeout=5.0 * SLOW))
        finally:
            for c in clients:
                c.close()

        # Over the metrics cap: a 503 (or a bare close), nothing else.
        for i, s in enumerate(idle[METRICS_CAP:]):
            data, closed = read_until_eof(s, 5.0 * SLOW)
            assert closed, "metrics connection %d over the cap left open" % (
                METRICS_CAP + i)
            assert data == b"" or data.startswith(b"HTTP/1.1 503 "), (
                "metrics connection over the cap got %r" % data[:200])

        # The ones admitted are closed by the idle deadline.
        bound = t_open + METRICS_IDLE_S + CLOSE_SLACK_S
        for i, s in enumerate(idle[:METRICS_CAP]):
            data, closed = read_until_eof(
                s, max(0.1, bound - time.monotonic()))
            assert closed, (
                "idle metrics connection %d still open %.1fs after it "
                "opened (deadline %.0fs)" % (i, time.monotonic() - t_open,
                                             METRICS_IDLE_S))
            assert data == b"", "idle connection got %r" % data[:200]
    finally:
        for s in idle:
            s.close()

    # The cap's slots are free again and the lock socket still serves.
    r = http(addr, "GET", "/metrics", timeout=5.0 * SLOW)
    assert r.status == 200, r
    r = unix_ping(d, 5.0 * SLOW)
    assert r.get("ok") is True, r


def test_metrics_connection_deadline(cluster, daemon_factory):
    port = free_port()
    daemon_factory.start(cluster, name="mdl",
                         extra=["--metrics-listen", "127.0.0.1:%d" % port])
    addr = ("127.0.0.1", port)

    # Silent: not closed at once, closed by the deadline.
    t0 = time.monotonic()
    with HttpConn(addr, timeout=5.0 * SLOW) as h:
        assert not h.is_closed(1.0), "silent metrics connection closed " \
            "within 1s (the deadline is %.0fs)" % METRICS_IDLE_S
        assert h.is_closed(METRICS_IDLE_S + CLOSE_SLACK_S -
                           (time.monotonic() - t0)), (
            "silent metrics connection still open after %.1fs"
            % (time.monotonic() - t0))

    # Idle between keep-alive requests: served, then closed.
    with HttpConn(addr, timeout=5.0 * SLOW) as h:
        r = h.request("GET", "/metrics")
        assert r.status == 200, r
        t1 = time.monotonic()
        assert h.is_closed(METRICS_IDLE_S + CLOSE_SLACK_S), (
            "keep-alive metrics connection still open %.1fs after its "
            "answer" % (time.monotonic() - t1))

    # A head trickled in never completes a request: closed all the same.
    s = socket.create_connection(addr, timeout=5.0 * SLOW)
    try:
        t2 = time.monotonic()
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        closed = False
        for i in range(1000):
            if time.monotonic() - t2 > METRICS_IDLE_S + CLOSE_SLACK_S:
                break
            try:
                s.sendall(b"X-Slow-%d: y\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            data, closed = read_until_eof(s, 0.5)
            if closed:
                break
        assert closed, "trickling metrics connection still open after " \
            "%.1fs" % (time.monotonic() - t2)
    finally:
        s.close()


# -- 2. half-close after a pipeline -----------------------------------------


def test_http_half_close_answers_the_whole_pipeline(daemon):
    res = rname("hc")
    with daemon.client(timeout=5.0 * SLOW) as holder:
        held = holder.call("acquire", resource=res, ttl_ms=30000)
        assert_ok(held, "holder")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5.0 * SLOW)
            s.connect(str(daemon.socket))
            acq = b"".join(HttpConn.build(
                "POST", "/v1/locks",
                {"resource": res, "ttl_ms": 10000, "wait_ms": 30000}))
            ping = b"".join(HttpConn.build("GET", "/v1/ping"))
            s.sendall(acq + ping)
            s.shutdown(socket.SHUT_WR)
            # The daemon sees the EOF while the acquire waits.
            early, closed = read_until_eof(s, 0.5 * SLOW)
            assert early == b"" and not closed, (
                "answered before the holder released: %r" % early[:300])
            assert_ok(holder.call("release", lock=held["lock"]))
            data, closed = read_until_eof(s, 10.0 * SLOW)
        finally:
            s.close()
    rs = parse_responses(data)
    assert len(rs) == 2, "half-closed pipeline of 2 got %d response(s) " \
        "(closed=%r): %r" % (len(rs), closed, rs)
    assert rs[0].status == 200 and rs[0].json().get("resource") == res, rs
    assert rs[1].status == 200 and rs[1].json().get("ok") is True, rs
    assert closed, "connection not closed after the last answer"


def test_http_request_cut_short_at_half_close_is_answered(daemon_mod):
    """A request whose head, or whose body (shorter than its
    Content-Length), is cut short by the client shutting its writing side
    gets a 400 naming why, after the answers to the complete requests
    before it; CRLFs after the last request are no request."""
    ping = b"".join(HttpConn.build("GET", "/v1/ping"))
    post = b"".join(HttpConn.build("POST", "/v1/locks",
                                   {"resource": rname("cut"),
                                    "ttl_ms": 1000}))
    cases = [(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n", 1),
             (post[:-5], 1),
             (ping + ping[:7], 2),
             (ping + b"\r\n\r\n", 1)]
    for data, n in cases:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(5.0 * SLOW)
            s.connect(str(daemon_mod.socket))
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            got, closed = read_until_eof(s, 5.0 * SLOW)
        finally:
            s.close()
        rs = parse_responses(got)
        assert closed and len(rs) == n, (data, got)
        for r in rs[:-1]:
            assert r.status == 200, (data, got)
        last = rs[-1]
        if data.endswith(b"\r\n\r\n"):
            assert last.status == 200, (data, got)
            continue
        assert last.status == 400, (data, got)
        assert last.json()["error"]["code"] == "bad_request", got
        assert "ended inside a request" in \
            last.json()["error"]["message"], got


def test_ndjson_half_close_behind_max_inflight(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="hcn",
                             extra=["--max-inflight", "1"])
    res = rname("hcn")
    with d.client(timeout=5.0 * SLOW) as holder, \
            d.client(timeout=5.0 * SLOW) as c:
        held = holder.call("acquire", resource=res, ttl_ms=30000)
        assert_ok(held, "holder")
        c.send_raw(Client.encode({"op": "acquire", "id": 1, "resource": res,
                                  "ttl_ms": 10000, "wait_ms": 30000}) +
                   Client.encode({"op": "ping", "id": 2}))
        c.sock.shutdown(socket.SHUT_WR)
        time.sleep(0.5 * SLOW)
        assert_ok(holder.call("release", lock=held["lock"]))
        lines = c.read_until_closed(10.0 * SLOW)
    msgs = [json.loads(ln) for ln in lines]
    assert sorted(m.get("id") for m in msgs) == [1, 2], msgs
    assert all(m.get("ok") is True for m in msgs), msgs


# -- 3. HEAD errors carry no body -------------------------------------------


def head_then(addr, head_req, next_req, timeout):
    """Sends head_req and next_req pipelined on one connection; returns
    (status, headers, bytes right after the first head)."""
    with HttpConn(addr, timeout=timeout) as h:
        h.send_raw(head_req + next_req)
        deadline = time.monotonic() + timeout
        for _ in range(10000):
            i = h.buf.find(b"\r\n\r\n")
            if i >= 0:
                rest = h.buf[i + 4:]
                done, _ = parse_one(rest) if rest.startswith(b"HTTP/") \
                    else (None, b"")
                if done is not None or h.eof or (
                        len(rest) >= 9 and not rest.startswith(b"HTTP/")):
                    status, _, headers = _parse_head(h.buf[:i])
                    return status, headers, rest
            if h.eof or time.monotonic() > deadline:
                break
            h.is_closed(min(0.2, max(0.01, deadline - time.monotonic())))
        raise AssertionError("no complete answers in %.1fs: %r"
                             % (timeout, h.buf[:300]))


def test_head_errors_have_no_body(cluster, daemon_factory):
    port = free_port()
    d = daemon_factory.start(cluster, name="head",
                             extra=["--metrics-listen", "127.0.0.1:%d" % port])
    tok = "a" * 32
    unix_next = b"".join(HttpConn.build("GET", "/v1/ping"))
    tcp_next = b"".join(HttpConn.build("GET", "/v1/health"))
    cases = [
        (d.socket, "/nope", 404, unix_next),
        # GET and HEAD of /v1/locks/... list or inspect: a bad query is
        # their error; the empty listing a 200 whose body stands still.
        (d.socket, "/v1/locks?limit=0", 400, unix_next),
        (d.socket, "/v1/locks/%s?limit=1" % tok, 400, unix_next),
        (d.socket, "/v1/locks", 200, unix_next),
        # Control: a 200 whose body does not change between the HEAD and
        # the GET below (health's does: its rtt_ms move).
        (d.socket, "/v1/ping", 200, unix_next),
        (("127.0.0.1", port), "/v1/ping", 404, tcp_next),  # metrics-only
        (("127.0.0.1", port), "/nope", 404, tcp_next),
    ]
    for addr, path, want, nxt in cases:
        head_req = b"".join(HttpConn.build("HEAD", path))
        status, headers, rest = head_then(addr, head_req, nxt, 5.0 * SLOW)
        assert status == want, (addr, path, status, headers)
        assert rest.startswith(b"HTTP/1.1 200 "), (
            "HEAD %s (%d): bytes after the head are not the next response's "
            "status line: %r" % (path, status, rest[:200]))
        # Content-Length is what GET would have sent.
        g = http(addr, "GET", path, timeout=5.0 * SLOW)
        assert g.status == want, (path, g)
        assert headers.get("content-length") == str(len(g.body)), (
            path, headers, len(g.body))

    # A parse error on HEAD: the head, then the close, nothing between.
    with HttpConn(d.socket, timeout=5.0 * SLOW) as h:
        h.send_raw(b"HEAD /v1/ping HTTP/1.1\r\nHost: x\r\n"
                   b"Content-Length: x\r\n\r\n")
        data, closed = read_until_eof(h.sock, 5.0 * SLOW)
    i = data.find(b"\r\n\r\n")
    assert i >= 0 and closed, (closed, data[:300])
    status, _, headers = _parse_head(data[:i])
    assert status == 400, data[:300]
    assert data[i + 4:] == b"", "HEAD 400 carried a body: %r" % data[i + 4:]
