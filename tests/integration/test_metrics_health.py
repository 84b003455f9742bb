"""/metrics and /v1/health. Counters move by exactly what was
done, the exposition parses, health flips with the quorum and never shows
a password, --metrics-listen serves only the read-only routes over TCP,
JSON logs, and no lock token ever appears in the log."""

import json
import os
import socket
import time

from extra import (PwRedis, curl1, free_port, http, metric, parse_metrics,
                   scrape, socket_listening)
from extra import xdaemons  # noqa: F401 (fixture)
from rl import (SLOW, TOKEN_RE, Closed, assert_error, assert_ok,
                lock_key, poll_until, rname)

U = "http://localhost"


def _delta(m0, m1, name, **labels):
    a = metric(m0, name, **labels)
    b = metric(m1, name, **labels)
    assert a is not None and b is not None, (name, labels, a, b)
    return b - a


def test_metrics_move_exactly(cluster, daemon):
    sock = daemon.socket
    m0 = scrape(sock)
    res = [rname("m") for _ in range(3)]
    with daemon.client() as c, daemon.client() as o:
        r1 = c.call("acquire", resource=res[0], ttl_ms=10000)
        r2 = c.call("acquire", resource=res[1], ttl_ms=10000)
        assert_ok(r1)
        assert_ok(r2)
        h = curl1(sock, "-X", "POST", U + "/v1/locks",
                  "-d", json.dumps({"resource": res[2], "ttl_ms": 10000}))
        assert h.status == 200, h
        assert_error(o.call("acquire", resource=res[0]), "busy")
        assert_error(o.call("acquire", resource=res[1], wait_ms=100),
                     "busy")
        assert_ok(c.call("release", lock=r1["lock"]))
        assert_ok(c.call("release", lock=r2["lock"]))
        assert_error(c.call("release", lock=r2["lock"]), "not_held")
        mid = scrape(sock)
        held_mid = metric(mid, "redlockd_locks_held")
        m1 = mid
        d = {
            "ok": _delta(m0, m1, "redlockd_acquisitions_total", result="ok"),
            "busy": _delta(m0, m1, "redlockd_acquisitions_total",
                           result="busy"),
            "rel_ok": _delta(m0, m1, "redlockd_releases_total",
                             result="ok"),
            "rel_not_held": _delta(m0, m1, "redlockd_releases_total",
                                   result="not_held"),
            "hist": _delta(m0, m1, "redlockd_acquire_duration_seconds_count"),
        }
        print("metric deltas: %r; locks_held %r" % (d, held_mid))
        assert d["ok"] == 3, d
        assert d["busy"] == 2, d
        assert d["rel_ok"] == 2, d
        assert d["rel_not_held"] == 1, d
        assert d["hist"] == 3, d
        assert held_mid == metric(m0, "redlockd_locks_held") + 1, held_mid
        h2 = curl1(sock, "-X", "DELETE", U + "/v1/locks/" + h.json()["lock"])
        assert h2.status == 200, h2
    m2 = scrape(sock)
    assert metric(m2, "redlockd_locks_held") == \
        metric(m0, "redlockd_locks_held"), m2
    assert _delta(m0, m2, "redlockd_releases_total", result="ok") == 3
    ups = {k: v for k, v in m2.items() if k[0] == "redlockd_node_up"}
    assert len(ups) == 5 and all(v == 1 for v in ups.values()), ups
    assert metric(m2, "redlockd_nodes_up") == 5


def test_exposition_parses(cluster, daemon):
    with daemon.client() as c:
        assert_ok(c.call("acquire", resource=rname("exp"), ttl_ms=5000))
        r = http(daemon.socket, "GET", "/metrics")
        assert r.status == 200, r
        ctype = r.headers.get("content-type", "")
        assert ctype.startswith("text/plain"), ctype
        text = r.body.decode()
        m = parse_metrics(text)  # asserts every line's shape
        assert text.endswith("\n"), text[-50:]
        # every sample's family has a TYPE line, before its first sample
        typed, seen_types = {}, set()
        for ln in text.splitlines():
            if ln.startswith("# TYPE "):
                _, _, name, kind = ln.split(" ", 3)
                assert name not in typed, "TYPE twice for %s" % name
                typed[name] = kind
            elif not ln.startswith("#"):
                name = ln.split("{")[0].split(" ")[0]
                fam = name
                for sfx in ("_bucket", "_sum", "_count"):
                    if name.endswith(sfx) and name[:-len(sfx)] in typed:
                        fam = name[:-len(sfx)]
                assert fam in typed, "sample before its TYPE: %r" % ln
                seen_types.add(fam)
        for name, kind in typed.items():
            assert kind in ("counter", "gauge", "histogram", "summary",
                            "untyped"), (name, kind)
            if kind == "counter":
                assert name.endswith("_total"), name
        # histogram buckets are cumulative and end with +Inf == _count
        name = "redlockd_acquire_duration_seconds"
        buckets = sorted(
            ((float("inf") if dict(lb)["le"] == "+Inf" else
              float(dict(lb)["le"])), v)
            for (n, lb), v in m.items() if n == name + "_bucket")
        assert buckets and buckets[-1][0] == float("inf"), buckets
        assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), \
            buckets
        assert buckets[-1][1] == metric(m, name + "_count") >= 1
        print("exposition: %d samples, %d families" % (len(m), len(typed)))


# -- health ----------------------------------------------------------------


def _health_http(sock):
    r = http(sock, "GET", "/v1/health", timeout=5.0)
    return r.status, r.json()


def _check_health_shape(h):
    assert isinstance(h.get("nodes"), list) and h["nodes"], h
    for n in h["nodes"]:
        for k in ("addr", "up", "state", "last_error", "rtt_ms"):
            assert k in n, (k, n)
        assert isinstance(n["addr"], str) and n["addr"], n
        assert isinstance(n["up"], bool), n
        assert isinstance(n["state"], str), n
        assert n["last_error"] is None or isinstance(n["last_error"], str), n
        assert n["rtt_ms"] is None or isinstance(n["rtt_ms"], (int, float)), n


def _flip_down_and_back(cluster, d):
    """kill -9 nodes 1-3, health must go 503; restart them, health must come
    back to 200 and locks work again. Returns (secs down, secs back)."""
    st, h = _health_http(d.socket)
    assert st == 200 and h["ok"] is True, (st, h)
    _check_health_shape(h)
    assert all(n["up"] and n["state"] == "up" for n in h["nodes"]), h
    for n, nd in zip(h["nodes"], cluster.nodes):
        assert str(nd.path) in n["addr"], (n, nd.path)
        assert n["rtt_ms"] is not None, n
    for nd in cluster.nodes[:3]:
        nd.kill9()
    val, down_secs = poll_until(lambda: _health_http(d.socket)[0] == 503,
                                5.0 * SLOW, 0.05)
    st, h = _health_http(d.socket)
    print("3 of 5 killed: health %d after %.0f ms: %s" % (
        st, down_secs * 1000, json.dumps(h)[:700]))
    assert st == 503, h
    assert h["ok"] is False, h
    assert_error(h, "no_quorum")
    _check_health_shape(h)
    for n in h["nodes"][:3]:
        assert n["up"] is False and n["state"] != "up", n
        assert isinstance(n["last_error"], str) and n["last_error"], n
    for n in h["nodes"][3:]:
        assert n["up"] is True, n
    m = scrape(d.socket)
    assert metric(m, "redlockd_nodes_up") == 2, m
    ups = [v for (nm, lb), v in m.items() if nm == "redlockd_node_up"]
    assert sorted(ups) == [0, 0, 0, 1, 1], ups
    with d.client() as c:
        assert_error(c.call("acquire", resource=rname("nq")), "no_quorum")
    for nd in cluster.nodes[:3]:
        nd.restart()
    val, back_secs = poll_until(lambda: _health_http(d.socket)[0] == 200,
                                10.0 * SLOW, 0.05)
    st, h = _health_http(d.socket)
    print("restarted: health %d after %.0f ms: %s" % (
        st, back_secs * 1000, [(n["state"], n["quarantined"],
                                n["last_error"]) for n in h["nodes"]]))
    assert st == 200 and h["ok"] is True, (
        "health still %d %.0f ms after the 3 nodes came back: %s" % (
            st, back_secs * 1000, json.dumps(h)))
    # and locks work again
    with d.client() as c:
        r, _ = poll_until(lambda: c.call("acquire", resource=rname("back"),
                                         ttl_ms=1000).get("ok"), 5.0, 0.1)
        assert r, "no acquire after the nodes came back"
    return down_secs, back_secs


def test_health_flips_with_quorum_persistent(cluster, daemon_factory):
    """Nodes marked ?persistent=1 count again as soon as they are back."""
    for nd in cluster.nodes:  # their restarts too (RedisNode.aof)
        nd.turn_aof_on()
    d = daemon_factory.start(cluster, name="hf", node_args=cluster.node_args())
    _flip_down_and_back(cluster, d)


def test_health_flips_back_after_quarantine(cluster, daemon_factory):
    """Non-persistent nodes restarted with a new run_id: --quarantine-ms 200
    says they count toward no quorum for 200 ms only."""
    d = daemon_factory.start(cluster, name="hq",
                             extra=["--quarantine-ms", "200"])
    _flip_down_and_back(cluster, d)


def test_health_paused_nodes_detected(cluster, daemon):
    """SIGSTOPped nodes are found out once a command to them stalls."""
    for nd in cluster.nodes[:3]:
        nd.pause()
    with daemon.client() as c:
        assert_error(c.call("acquire", resource=rname("p"), timeout=5.0),
                     "no_quorum")
    val, secs = poll_until(lambda: _health_http(daemon.socket)[0] == 503,
                           5.0 * SLOW, 0.1)
    st, h = _health_http(daemon.socket)
    print("3 of 5 paused: health %d after %.0f ms; states %r" % (
        st, secs * 1000, [(n["state"], n["last_error"]) for n in
                          h["nodes"]]))
    assert st == 503, h
    cluster.resume_all()
    val, secs = poll_until(lambda: _health_http(daemon.socket)[0] == 200,
                           10.0 * SLOW, 0.1)
    print("resumed: health 200 after %.0f ms" % (secs * 1000))
    assert val, _health_http(daemon.socket)


def test_password_never_shown(cluster, xdaemons):
    pw = "secret"
    reds = [PwRedis(cluster.dir, "pw1", pw, tcp=True),
            PwRedis(cluster.dir, "pw2", pw),
            PwRedis(cluster.dir, "pw3", pw, tcp=True)]
    try:
        for r in reds:
            r.start()
        uris = ["redis://:%s@127.0.0.1:%d" % (pw, reds[0].port),
                "unix://:%s@%s" % (pw, reds[1].path),
                "redis://default:%s@127.0.0.1:%d/2" % (pw, reds[2].port)]
        node_args = []
        for u in uris:
            node_args += ["--node", u]
        d = xdaemons.start(cluster, name="pw", node_args=node_args)
        st, h = _health_http(d.socket)
        print("health: %s" % json.dumps(h))
        assert st == 200 and h["ok"] is True, h
        assert all(n["up"] for n in h["nodes"]), h
        with d.client() as c:
            r = c.call("acquire", resource=rname("pw"), ttl_ms=5000)
            assert_ok(r)
            assert_ok(c.call("release", lock=r["lock"]))
        mtext = http(d.socket, "GET", "/metrics").body.decode()
        htext = http(d.socket, "GET", "/v1/health").body.decode()
        # a node with a wrong password: down, with an error, still no pw
        bad = "wrongpw-%d" % os.getpid()
        d2 = xdaemons.start(
            cluster, name="pwbad",
            node_args=["--node", "unix://:%s@%s" % (bad, reds[2].path),
                       "--node", "unix://:%s@%s" % (pw, reds[1].path),
                       "--node", "redis://:%s@127.0.0.1:%d" % (pw,
                                                               reds[0].port)],
            ready=socket_listening)
        h2, _ = poll_until(lambda: (lambda hh: hh if hh["nodes"][0]
                                    .get("last_error") else None)(
            _health_http(d2.socket)[1]), 5.0, 0.05)
        print("wrong password node: %r" % (h2 or {}).get("nodes", [None])[0])
        assert h2 and h2["nodes"][0]["up"] is False, h2
        h2text = http(d2.socket, "GET", "/v1/health").body.decode()
        m2text = http(d2.socket, "GET", "/metrics").body.decode()
        xdaemons.teardown()  # flush both logs
        for what, text in [("health", htext), ("metrics", mtext),
                           ("stderr", d.stderr_text()),
                           ("bad health", h2text), ("bad metrics", m2text),
                           ("bad stderr", d2.stderr_text())]:
            assert pw not in text, "password shown in %s: %s" % (
                what, text[max(0, text.find(pw) - 200):text.find(pw) + 50])
            assert bad not in text, "wrong password shown in %s" % what
    finally:
        for r in reds:
            r.stop()


def test_metrics_listen_tcp_read_only(cluster, daemon_factory):
    port = free_port()
    d = daemon_factory.start(cluster, name="ml",
                             extra=["--metrics-listen", "127.0.0.1:%d" % port])
    addr = ("127.0.0.1", port)
    r = http(addr, "GET", "/metrics")
    assert r.status == 200, r
    parse_metrics(r.body.decode())
    r = http(addr, "GET", "/v1/health")
    assert r.status == 200 and r.json()["ok"] is True, r
    res = rname("tcp")
    tok = "a" * 32
    refused = []
    for method, path, body in [
            ("POST", "/v1/locks", {"resource": res, "ttl_ms": 5000}),
            ("DELETE", "/v1/locks/%s?resource=%s" % (tok, res), None),
            ("POST", "/v1/locks/%s/extend" % tok, {"resource": res}),
            ("POST", "/v1/locks/%s/complete" % tok, {"resource": res}),
            ("GET", "/v1/ping", None)]:
        try:
            r = http(addr, method, path, body)
            refused.append((method, path, r.status))
        except (Closed, ConnectionError) as e:
            refused.append((method, path, repr(e)))
    print("TCP listener: %r" % refused)
    for method, path, st in refused[:4]:
        assert st == 404 or not isinstance(st, int), (method, path, st)
    # an NDJSON line is refused too: an error and/or a close, never a lock
    s = socket.create_connection(addr, timeout=3.0)
    try:
        s.sendall(json.dumps({"op": "acquire", "id": 1, "resource": res,
                              "ttl_ms": 5000}).encode() + b"\n")
        data = b""
        for _ in range(100):
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            data += chunk
        print("NDJSON on the TCP listener -> %r" % data[:200])
        assert b'"ok":true' not in data, data
    finally:
        s.close()
    assert cluster.get_all(lock_key(res)) == [None] * 5
    m = scrape(d.socket)
    assert metric(m, "redlockd_acquisitions_total", result="ok") == 0, m


# -- logs ------------------------------------------------------------------


def _workload_tokens(d, cluster):
    """Runs every kind of operation; returns every token issued."""
    toks = []
    with d.client() as c, d.client() as o:
        r = c.call("acquire", resource=rname("lg"), ttl_ms=5000, fence=True)
        toks.append(r["lock"])
        assert_ok(c.call("extend", lock=r["lock"], ttl_ms=6000))
        assert_ok(c.call("release", lock=r["lock"]))
        assert_error(c.call("release", lock=r["lock"]), "not_held")
        r = c.call("acquire", resource=rname("lg"), ttl_ms=5000)
        toks.append(r["lock"])
        assert_ok(c.call("complete", lock=r["lock"]))
        assert_error(c.call("complete", lock=r["lock"]), "not_held")
        r = c.call("acquire", resource=rname("lg"), ttl_ms=300, renew=True)
        toks.append(r["lock"])
        res = rname("lg")
        r = o.call("acquire", resource=res, ttl_ms=5000)
        toks.append(r["lock"])
        assert_error(c.call("acquire", resource=res, wait_ms=100), "busy")
        time.sleep(0.5)  # a few renewals
        h = curl1(d.socket, "-X", "POST", U + "/v1/locks",
                  "-d", json.dumps({"resource": rname("lg"), "ttl_ms": 5000}))
        toks.append(h.json()["lock"])
        curl1(d.socket, "-X", "POST", U + "/v1/locks/%s/extend" % toks[-1])
        curl1(d.socket, "-X", "DELETE", U + "/v1/locks/" + toks[-1])
        curl1(d.socket, "-X", "DELETE", U + "/v1/locks/" + toks[-1])
        # a renewing lock that is lost
        r = c.call("acquire", resource=rname("lg"), ttl_ms=400, renew=True)
        toks.append(r["lock"])
        for nd in cluster.nodes[:3]:
            nd.pause()
        try:
            c.wait_event(timeout=5.0 * SLOW)
        finally:
            cluster.resume_all()
    # o's lock and c's renewing lock are released with their sessions
    for t in toks:
        assert TOKEN_RE.match(t), t
    return toks


def _assert_no_tokens(text, toks):
    for t in toks:
        assert t not in text, "token %s in the log: %r" % (
            t, text[max(0, text.find(t) - 200):text.find(t) + 40])


def test_json_log_lines_and_node_down_warning(cluster, daemon_factory):
    d = daemon_factory.start(cluster, name="jl",
                             extra=["--log-format", "json"])
    toks = _workload_tokens(d, cluster)
    cluster.nodes[2].kill9()
    # commands to the dead node: the daemon notices at once on unix sockets
    with d.client() as c:
        r = c.call("acquire", resource=rname("lg"), ttl_ms=1000)
        if r.get("ok"):
            toks.append(r["lock"])
    poll_until(lambda: not _health_http(d.socket)[1]["nodes"][2]["up"],
               5.0, 0.05)
    time.sleep(0.2)
    text = d.stderr_text()
    lines = [ln for ln in text.split("\n") if ln]
    assert lines, "no log at all"
    warn_about_node = []
    for ln in lines:
        try:
            o = json.loads(ln)
        except ValueError:
            raise AssertionError("log line is not JSON: %r" % ln)
        assert isinstance(o, dict), ln
        for k in ("ts", "level", "msg"):
            assert isinstance(o.get(k), str) and o[k], (k, ln)
        assert o["level"] in ("error", "warn", "info", "debug"), ln
        if o["level"] in ("warn", "error") and (
                "n3.sock" in ln or "node 3" in ln):
            warn_about_node.append(o)
    print("%d JSON log lines; node 3 warnings: %r" % (
        len(lines), warn_about_node[:3]))
    assert warn_about_node, "no warn line names the dead node 3:\n%s" % (
        "\n".join(lines[-30:]))
    _assert_no_tokens(text, toks)
    cluster.nodes[2].restart()


def test_text_log_has_no_tokens(cluster, daemon):
    toks = _workload_tokens(daemon, cluster)
    time.sleep(0.2)
    text = daemon.stderr_text()
    print("%d text log lines checked for %d tokens" % (
        len(text.splitlines()), len(toks)))
    assert "DEBUG" in text  # the fixture runs at debug level
    _assert_no_tokens(text, toks)
