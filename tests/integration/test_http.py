"""The HTTP/1.1 framing, driven with curl --unix-socket (and raw
sockets where curl cannot show it): every route, every HTTP-level error
status, keep-alive, pipelining, Expect: 100-continue, HTTP locks not tied
to the connection."""

import json
import time

from extra import HttpConn, curl, curl1, metric, parse_responses, scrape
from rl import (SLOW, TOKEN_RE, assert_error, assert_ok, lock_key,
                poll_until, rname)

U = "http://localhost"


def _post(sock, path, body=None, *extra):
    args = ["-X", "POST", U + path, "-H", "Content-Type: application/json"]
    if body is not None:
        args += ["--data-binary", body if isinstance(body, str)
                 else json.dumps(body)]
    return curl1(sock, *(list(extra) + args))


def _acquire(sock, res, **fields):
    r = _post(sock, "/v1/locks", dict(resource=res, **fields))
    assert r.status == 200, r
    body = r.json()
    assert_ok(body, "HTTP acquire")
    assert TOKEN_RE.match(body["lock"]), body
    return body


# -- every route -----------------------------------------------------------


def test_routes_acquire_extend_release(cluster_mod, daemon_mod):
    sock = daemon_mod.socket
    res = rname("hroute")
    key = lock_key(res)
    r = _post(sock, "/v1/locks", {"resource": res, "ttl_ms": 10000,
                                  "fence": True})
    print("POST /v1/locks -> %d %r" % (r.status, r.body))
    assert r.status == 200, r
    assert r.headers.get("content-type", "").startswith("application/json")
    b = r.json()
    assert_ok(b)
    assert b["resource"] == res and 0 < b["validity_ms"] <= 10000, b
    assert isinstance(b.get("fence"), int), b
    tok = b["lock"]
    assert cluster_mod.get_all(key) == [tok.encode()] * 5

    r = _post(sock, "/v1/locks/%s/extend" % tok, {"ttl_ms": 20000})
    assert r.status == 200, r
    e = r.json()
    assert_ok(e, "extend")
    assert e["lock"] == tok and 10000 < e["validity_ms"] <= 20000, e
    pttls = cluster_mod.pttl_all(key)
    assert all(isinstance(p, int) and 10000 < p <= 20000 for p in pttls), \
        pttls

    # extend with no body at all (Content-Length: 0): the lock's own ttl
    r = curl1(sock, "-X", "POST", U + "/v1/locks/%s/extend" % tok)
    assert r.status == 200, r

    r = curl1(sock, "-X", "DELETE",
              U + "/v1/locks/%s?resource=%s" % (tok, res))
    print("DELETE -> %d %r" % (r.status, r.body))
    assert r.status == 200, r
    assert_ok(r.json(), "release")
    assert cluster_mod.get_all(key) == [None] * 5

    # again: not_held is 404
    r = curl1(sock, "-X", "DELETE",
              U + "/v1/locks/%s?resource=%s" % (tok, res))
    assert r.status == 404, r
    assert_error(r.json(), "not_held")
    r = _post(sock, "/v1/locks/%s/extend" % tok, {"resource": res})
    assert r.status == 404, r
    assert_error(r.json(), "not_held")


def test_route_complete_then_done_409(cluster_mod, daemon_mod):
    sock = daemon_mod.socket
    res = rname("hdone")
    b = _acquire(sock, res, ttl_ms=10000)
    r = _post(sock, "/v1/locks/%s/complete" % b["lock"],
              {"keep_ms": 60000, "resource": res})
    print("complete -> %d %r" % (r.status, r.body))
    assert r.status == 200, r
    assert_ok(r.json(), "complete")
    assert cluster_mod.get_all(lock_key(res)) == \
        [b"done:" + b["lock"].encode()] * 5
    r = _post(sock, "/v1/locks", {"resource": res})
    assert r.status == 409, r
    assert_error(r.json(), "done")
    r = _post(sock, "/v1/locks/%s/complete" % b["lock"], None)
    assert r.status == 404, r
    assert_error(r.json(), "not_held")


def test_route_busy_409(daemon_mod):
    sock = daemon_mod.socket
    res = rname("hbusy")
    b = _acquire(sock, res, ttl_ms=10000)
    r = _post(sock, "/v1/locks", {"resource": res, "ttl_ms": 1000})
    assert r.status == 409, r
    assert_error(r.json(), "busy")
    r = curl1(sock, "-X", "DELETE", U + "/v1/locks/" + b["lock"])
    assert r.status == 200, r


def test_route_ping_health_metrics(daemon_mod):
    sock = daemon_mod.socket
    r = curl1(sock, U + "/v1/ping")
    assert r.status == 200 and r.json() == {"ok": True}, r
    r = curl1(sock, U + "/v1/health")
    assert r.status == 200, r
    h = r.json()
    assert h["ok"] is True and h["quorum"] == 3 and len(h["nodes"]) == 5, h
    r = curl1(sock, U + "/metrics")
    assert r.status == 200, r
    assert r.headers.get("content-type", "").startswith("text/plain"), r
    assert b"redlockd_acquisitions_total" in r.body
    # HEAD is allowed on GET routes
    p = __import__("subprocess").run(
        ["curl", "-s", "-I", "--max-time", "10", "--unix-socket", str(sock),
         U + "/v1/ping"], capture_output=True, timeout=15)
    assert p.stdout.startswith(b"HTTP/1.1 200"), p.stdout
    assert b"content-length: 11" in p.stdout.lower(), p.stdout


def test_http_lock_outlives_connection(cluster_mod, daemon_mod):
    sock = daemon_mod.socket
    res = rname("hkeep")
    key = lock_key(res)
    b = _acquire(sock, res, ttl_ms=10000)  # curl has exited
    time.sleep(0.5)
    vals = cluster_mod.get_all(key)
    print("0.5 s after curl exited the key holds %r" % vals[:1])
    assert vals == [b["lock"].encode()] * 5, vals
    # The lock is still known to the daemon without ?resource= too.
    r = curl1(sock, "-X", "DELETE", U + "/v1/locks/" + b["lock"])
    assert r.status == 200, r
    assert cluster_mod.get_all(key) == [None] * 5


# -- error statuses --------------------------------------------------------


def test_400_bad_json_and_bad_field(daemon_mod):
    sock = daemon_mod.socket
    r = _post(sock, "/v1/locks", '{"resource": "x",')
    assert r.status == 400, r
    assert_error(r.json(), "bad_request")
    r = _post(sock, "/v1/locks", {"resource": rname("h400"), "ttl_ms": 5})
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "ttl_ms")
    r = _post(sock, "/v1/locks", {"resource": rname("h400"), "bogus": 1})
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "bogus")
    r = _post(sock, "/v1/locks", {"op": "release", "resource": "x"})
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "op")
    r = curl1(sock, "-X", "DELETE", U + "/v1/locks/NOTAHEXTOKEN")
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "lock")


def test_400_query_on_acquire(cluster_mod, daemon_mod):
    """Acquire reads the body only: a query such as ?ttl_ms= is refused,
    never dropped in silence (that lock would get the default TTL)."""
    res = rname("hq")
    r = _post(daemon_mod.socket, "/v1/locks?ttl_ms=60000", {"resource": res})
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "JSON body")
    assert cluster_mod.get_all(lock_key(res)) == [None] * 5
    # the query is refused whatever the body lacks: "?resource=" with "{}"
    # is told where its field goes, not "resource: required"
    r = _post(daemon_mod.socket, "/v1/locks?resource=%s" % res, {})
    assert r.status == 400, r
    assert_error(r.json(), "bad_request", "JSON body")
    assert cluster_mod.get_all(lock_key(res)) == [None] * 5


def test_400_echoes_the_body_id(daemon_mod):
    """A body whose id could be read gets it back with its 400, as the same
    request gets it over NDJSON (proto/README.md: the id is echoed in error
    responses whenever it could be read)."""
    res = rname("hid")
    tok = "a" * 32
    cases = [  # method, path, body, id as echoed, field named
        ("POST", "/v1/locks",
         '{"id":"h-1","resource":"%s","ttl_ms":5}' % res, '"h-1"', "ttl_ms"),
        ("POST", "/v1/locks", '{"id":1.50E+3,"resource":1}', "1.50E+3",
         "resource"),
        ("DELETE", "/v1/locks/" + tok, '{"id":7,"lock":"%s"}' % ("b" * 32),
         "7", "lock"),
        ("POST", "/v1/locks/%s/extend?resource=y" % tok,
         '{"id":null,"resource":"x"}', "null", "resource"),
    ]
    with HttpConn(daemon_mod.socket) as h, daemon_mod.client() as c:
        for method, path, body, id_text, field in cases:
            r = h.request(method, path, body)
            assert r.status == 400, (path, r)
            assert_error(r.json(), "bad_request", field)
            want = b'{"id":' + id_text.encode() + b","
            assert r.body.startswith(want), (path, r)
            if path == "/v1/locks":  # the same body as an NDJSON line
                c.send_raw(b'{"op":"acquire",' + body[1:].encode() + b"\n")
                assert c.read_line().startswith(want)


def test_longest_resource_percent_encoded(cluster_mod, daemon_mod):
    """A resource of the full 512 bytes, all of it non-ASCII, written the way
    HTTP clients write it (every byte percent-encoded: 1536 bytes of
    request-target), is inspected by path and released by ?resource=, not
    refused 414 URI Too Long."""
    sock = daemon_mod.socket
    base = rname("hlong") + ":"
    pad = 512 - len(base)
    res = base + "x" * (pad % 2) + "\u00e9" * (pad // 2)
    assert len(res.encode()) == 512
    enc = "".join("%%%02X" % b for b in res.encode())
    with HttpConn(sock) as h:
        r = h.request("POST", "/v1/locks", {"resource": res,
                                             "ttl_ms": 20000})
        assert r.status == 200, r
        tok = r.json()["lock"]
        r = h.request("GET", "/v1/locks/%s?fence=false" % enc)
        assert r.status == 200, r
        assert r.json()["resource"] == res and r.json()["state"] == "held", r
        r = h.request("DELETE", "/v1/locks/%s?resource=%s" % (tok, enc))
        assert r.status == 200, r
    assert cluster_mod.get_all(lock_key(res)) == [None] * 5


def test_404_unknown_path(daemon_mod):
    # (GET of /v1/locks/... is inspect of the resource after the slash.)
    for method, path in (("GET", "/nope"), ("GET", "/v1/lock"),
                         ("POST", "/v1/locks/%s/frob" % ("a" * 32)),
                         ("GET", "/v2/ping"), ("GET", "/v1/pingx")):
        r = curl1(daemon_mod.socket, "-X", method, U + path)
        print("%s %s -> %d" % (method, path, r.status))
        assert r.status == 404, (path, r)
        # the code is the documented one (proto/README.md, HTTP)
        assert_error(r.json(), "bad_request")


def test_405_wrong_method_with_allow(daemon_mod):
    cases = [("PUT", "/v1/locks", "POST"), ("DELETE", "/v1/locks", "GET"),
             ("POST", "/v1/ping", "GET"), ("DELETE", "/metrics", "GET"),
             ("DELETE", "/v1/locks/%s/extend" % ("a" * 32), "POST"),
             ("POST", "/v1/locks/%s" % ("a" * 32), "DELETE")]
    for method, path, allowed in cases:
        r = curl1(daemon_mod.socket, "-X", method, U + path)
        print("%s %s -> %d Allow: %r" % (method, path, r.status,
                                         r.headers.get("allow")))
        assert r.status == 405, (method, path, r)
        assert_error(r.json(), "bad_request")
        allow = [a.strip() for a in r.headers.get("allow", "").split(",")]
        assert allowed in allow, (method, path, r.headers)


def test_411_chunked(daemon_mod):
    r = curl1(daemon_mod.socket, "-X", "POST", U + "/v1/locks",
              "-H", "Transfer-Encoding: chunked",
              "--data-binary", '{"resource":"%s"}' % rname("h411"))
    assert r.status == 411, r
    assert_error(r.json(), "bad_request")


def _raw_exchange(path, data, timeout=3.0):
    """Writes data (a daemon that answers early and closes may cut the
    write short: tolerated), then reads to EOF; returns the responses."""
    with HttpConn(path, timeout) as h:
        try:
            h.send_raw(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        h.is_closed(timeout)
        return parse_responses(h.buf)


def test_413_body_over_limit(daemon_mod):
    res = rname("h413")
    body = ('{"resource":"%s","ttl_ms":1000%s}' % (res, " " * 70000)).encode()
    head, _ = HttpConn.build("POST", "/v1/locks", body)
    # the head alone announces too much: 413 without waiting for the body
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(head)
        r = h.read_response(2.0)
        print("Content-Length %d, no body sent -> %d" % (len(body), r.status))
        assert r.status == 413, r
        assert_error(r.json(), "too_large")
        assert h.is_closed(2.0), "still open after 413"
    # head and body in one go
    rs = _raw_exchange(daemon_mod.socket, head + body)
    assert rs and rs[0].status == 413, rs
    # curl with Expect: 100-continue is refused before it sends the body
    r = curl1(daemon_mod.socket, "-X", "POST", U + "/v1/locks",
              "-H", "Expect: 100-continue",
              "--data-binary", body.decode())
    assert r.status == 413, r


def test_413_custom_max_line_bytes(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="ml",
                             extra=["--max-line-bytes", "2048"])
    ok = '{"resource":"%s"%s}' % (rname("ok"), " " * 1500)
    r = _post(d.socket, "/v1/locks", ok)
    assert r.status == 200, r
    big = '{"resource":"%s"%s}' % (rname("big"), " " * 2100)
    r = _post(d.socket, "/v1/locks", big)
    assert r.status == 413, r


def test_431_huge_headers(daemon_mod):
    data = (b"GET /v1/ping HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"h" * 70000 +
            b"\r\n\r\n")
    rs = _raw_exchange(daemon_mod.socket, data)
    print("70 kB header -> %r" % [r.status for r in rs])
    assert rs and rs[0].status == 431, rs
    assert_error(rs[0].json(), "too_large")
    many = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 30) for i in range(3000))
    rs = _raw_exchange(daemon_mod.socket,
                       b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n" + many +
                       b"\r\n")
    print("3000 headers -> %r" % [r.status for r in rs])
    assert rs and rs[0].status == 431, rs
    # a huge request line (URI)
    rs = _raw_exchange(daemon_mod.socket,
                       b"GET /v1/ping?" + b"q" * 70000 +
                       b" HTTP/1.1\r\nHost: x\r\n\r\n")
    print("70 kB URI -> %r" % [r.status for r in rs])
    assert rs and rs[0].status in (414, 431), rs


def test_414_417_505_codes_and_close(daemon_mod):
    """The other HTTP-level refusals proto/README.md lists: each its status
    and code, and the connection closed after it."""
    long_target = "/v1/locks/" + "a" * 2039  # 2049 bytes
    cases = [
        (b"GET %s HTTP/1.1\r\n\r\n" % long_target.encode(), 414,
         "too_large"),
        (b"POST /v1/locks HTTP/1.1\r\nExpect: 200-ok\r\n"
         b"Content-Length: 2\r\n\r\n{}", 417, "bad_request"),
        (b"GET /v1/ping HTTP/2.0\r\n\r\n", 505, "bad_request"),
    ]
    for data, status, code in cases:
        with HttpConn(daemon_mod.socket) as h:
            h.send_raw(data)
            r = h.read_response(3.0)
            assert r.status == status, (data[:40], r)
            assert_error(r.json(), code)
            assert h.is_closed(3.0), "still open after %d" % status
    # One byte less is a request like any other (an inspect).
    r = HttpConn.build("GET", long_target[:-1])[0]
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(r)
        assert h.read_response(3.0).status == 400  # resource over 512 bytes


def test_503_no_quorum(cluster, daemon):
    res = rname("h503")
    for nd in cluster.nodes[:3]:
        nd.pause()
    t0 = time.monotonic()
    r = _post(daemon.socket, "/v1/locks", {"resource": res, "ttl_ms": 5000})
    dt = time.monotonic() - t0
    print("acquire with 3 of 5 paused: %d %r after %.0f ms" % (
        r.status, r.body, dt * 1000))
    assert r.status == 503, r
    assert_error(r.json(), "no_quorum")
    cluster.resume_all()
    # Rolled back: nothing is left on the nodes that answered.
    vals, _ = poll_until(
        lambda: all(v is None for v in cluster.get_all(lock_key(res))),
        3.0 * SLOW)
    assert vals, cluster.get_all(lock_key(res))


# -- connection handling ---------------------------------------------------


def test_keep_alive_two_urls_one_connection(daemon_mod):
    sock = daemon_mod.socket
    before = metric(scrape(sock), "redlockd_client_connections_total")
    rs, p = curl(sock, U + "/v1/ping", U + "/v1/health", verbose=True)
    after = metric(scrape(sock), "redlockd_client_connections_total")
    err = p.stderr.decode(errors="replace")
    assert [r.status for r in rs] == [200, 200], rs
    assert "Re-using existing connection" in err, err[-1500:]
    # one connection for curl, one for the second scrape
    assert after - before == 2, (before, after)


def test_http10_keep_alive_is_said(daemon_mod):
    """An HTTP/1.0 client asks for keep-alive with a header and keeps the
    connection only if the answer says so (ab -k); without it, it waits
    for a close that never comes. HTTP/1.1 answers say it too."""
    with HttpConn(daemon_mod.socket) as h:
        for _ in range(2):
            h.send_raw(b"GET /v1/ping HTTP/1.0\r\n"
                       b"Connection: Keep-Alive\r\n\r\n")
            r = h.read_response(3.0)
            assert r.status == 200, r
            assert r.headers.get("connection") == "keep-alive", r.headers
        assert not h.is_closed(0.3), "closed a keep-alive HTTP/1.0 connection"
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(b"GET /v1/ping HTTP/1.0\r\n\r\n")
        r = h.read_response(3.0)
        assert r.headers.get("connection") == "close", r.headers
        assert h.is_closed(3.0)
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(b"GET /v1/ping HTTP/1.1\r\nHost: x\r\n\r\n")
        r = h.read_response(3.0)
        assert r.headers.get("connection") == "keep-alive", r.headers


def test_pipelined_raw_requests_in_order(cluster_mod, daemon_mod):
    res = rname("hpipe")
    body = json.dumps({"resource": res, "ttl_ms": 10000}).encode()
    reqs = [HttpConn.build("GET", "/v1/ping"),
            HttpConn.build("GET", "/nope"),
            HttpConn.build("POST", "/v1/locks", body),
            HttpConn.build("POST", "/v1/locks", body),
            HttpConn.build("GET", "/v1/health"),
            HttpConn.build("PUT", "/v1/ping", b"{}"),
            HttpConn.build("GET", "/v1/ping")]
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(b"".join(hd + bd for hd, bd in reqs))
        rs = [h.read_response(5.0) for _ in reqs]
        statuses = [r.status for r in rs]
        print("pipelined statuses: %r" % statuses)
        assert statuses == [200, 404, 200, 409, 200, 405, 200], rs
        assert rs[0].json() == {"ok": True}
        assert rs[2].json()["resource"] == res
        assert_error(rs[3].json(), "busy")
        assert "nodes" in rs[4].json()
        tok = rs[2].json()["lock"]
        r = h.request("DELETE", "/v1/locks/" + tok)
        assert r.status == 200, r
    assert cluster_mod.get_all(lock_key(res)) == [None] * 5


def test_expect_100_continue_curl(daemon_mod):
    res = rname("h100")
    body = '{"resource":"%s","ttl_ms":5000%s}' % (res, " " * 4000)
    t0 = time.monotonic()
    rs, p = curl(daemon_mod.socket, "-X", "POST", U + "/v1/locks",
                 "-H", "Expect: 100-continue",
                 "-H", "Content-Type: application/json",
                 "--data-binary", body)
    dt = time.monotonic() - t0
    print("curl with Expect: 100-continue: %r in %.0f ms" % (
        [r.status for r in rs], dt * 1000))
    assert [r.status for r in rs] == [100, 200], rs
    # curl waits 1 s for the 100 when the server stays silent
    assert dt < 0.9, dt
    tok = rs[-1].json()["lock"]
    r = curl1(daemon_mod.socket, "-X", "DELETE", U + "/v1/locks/" + tok)
    assert r.status == 200, r


def test_expect_100_continue_raw(daemon_mod):
    """The client waits for the 100 before it sends the body."""
    res = rname("h100raw")
    body = json.dumps({"resource": res, "ttl_ms": 5000}).encode()
    head, _ = HttpConn.build("POST", "/v1/locks", body,
                             {"Expect": "100-continue"})
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(head)
        cont = h.read_response(2.0)
        assert cont.status == 100, cont
        h.send_raw(body)
        r = h.read_response(5.0)
        assert r.status == 200, r
        assert_ok(r.json())
        # keep-alive goes on afterwards
        r2 = h.request("DELETE", "/v1/locks/" + r.json()["lock"])
        assert r2.status == 200, r2
        # A bad route: either the 404 at once, or a 100 and the 404 once
        # the body is in (both are allowed by RFC 9110).
        head, _ = HttpConn.build("POST", "/v1/nope", body,
                                 {"Expect": "100-continue"})
        h.send_raw(head)
        r3 = h.read_response(2.0)
        print("Expect: 100-continue on an unknown route: first answer %d"
              % r3.status)
        if r3.status == 100:
            h.send_raw(body)
            r3 = h.read_response(2.0)
        assert r3.status == 404, r3


def test_http_after_error_connection_usable(daemon_mod):
    """400/404/405/409 keep the connection; 411/413/431 close it."""
    with HttpConn(daemon_mod.socket) as h:
        for method, path, body, want in [
                ("POST", "/v1/locks", b"{oops", 400),
                ("GET", "/zzz", None, 404),
                ("PUT", "/v1/locks", None, 405),
                ("GET", "/v1/ping", None, 200)]:
            r = h.request(method, path, body)
            assert r.status == want, (method, path, r)
    with HttpConn(daemon_mod.socket) as h:
        h.send_raw(b"POST /v1/locks HTTP/1.1\r\nHost: x\r\n"
                   b"Transfer-Encoding: chunked\r\n\r\n5\r\n{...}\r\n0\r\n\r\n")
        r = h.read_response(2.0)
        assert r.status == 411, r
        assert h.is_closed(2.0), "still open after 411"
