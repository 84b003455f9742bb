"""Redis ACL users, live. The five nodes get the least-privilege
user that docs/operations.md recommends (its `ACL SETUSER redlockd ...` line
is read from there, so the documented line is the tested one) and a default
user with a password of its own, so only the ACL user gets in. The daemon
authenticates as that user with the password in the URI, from
--redis-password-file or from REDLOCKD_REDIS_PASSWORD; every operation runs
without a single refusal in ACL LOG; a wrong password leaves the nodes down
with a clear log line; the password shows nowhere."""

import os
import re

from extra import http, socket_listening
from extra import xdaemons  # noqa: F401 (fixture)
from rl import (REPO, SLOW, Resp, RespError, assert_error, assert_ok,
                lock_key, need_acl_channels, poll_until, pytest, resp_cmd,
                rname, run_bin)

USER = "redlockd"
DOCS = REPO / "docs" / "operations.md"
DB = 3  # the last node is named with ?db=3: SELECT runs as the user too


@pytest.fixture(autouse=True)
def _nodes_with_channel_rules(request):
    if "cluster" in request.fixturenames:
        need_acl_channels(request.getfixturevalue("cluster").nodes)


def _acl_rules(password):
    """The documented ACL SETUSER line's rules, with the real password."""
    lines = [ln.strip() for ln in DOCS.read_text().splitlines()
             if ln.strip().startswith("ACL SETUSER %s " % USER)]
    assert len(lines) == 1, "docs/operations.md should hold one `ACL " \
        "SETUSER %s` line, found %r" % (USER, lines)
    words = lines[0].split()[3:]
    assert ">PASSWORD" in words, lines[0]
    return [">" + password if w == ">PASSWORD" else w for w in words]


def _lock_down(cluster, password, without=()):
    """Adds the ACL user to every node and gives the default user a
    password the daemon does not know (the tests use it to inspect);
    without: rules of the documented line to leave out."""
    admin = "admin-%s" % os.urandom(8).hex()
    rules = [r for r in _acl_rules(password) if r not in without]
    for nd in cluster.nodes:
        assert nd.cmd("ACL", "SETUSER", USER, *rules) == "OK"
        assert nd.cmd("ACL", "SETUSER", "default", "resetpass",
                      ">" + admin) == "OK"
        nd.password = admin
        assert nd.cmd("ACL", "LOG", "RESET") == "OK"
        try:
            resp_cmd(nd.path, "PING")
            raise AssertionError("node %d still answers without AUTH" % nd.k)
        except RespError as e:
            assert "NOAUTH" in str(e), e
    print("ACL SETUSER %s %s" % (USER, " ".join(
        "***" if r.startswith(">") else r for r in rules)))


def _node_args(cluster, userinfo):
    args = []
    for i, nd in enumerate(cluster.nodes):
        q = "?db=%d" % DB if i == len(cluster.nodes) - 1 else ""
        args += ["--node", "unix://%s@%s%s" % (userinfo, nd.path, q)]
    return args


def _get_key(cluster, key):
    """GET key on every node, the last one in db DB."""
    out = cluster.get_all(key)[:-1]
    nd = cluster.nodes[-1]
    with Resp(nd.path, password=nd.password) as r:
        r.cmd("SELECT", DB)
        out.append(r.cmd("GET", key))
    return out


def _acl_refusals(cluster):
    """Every ACL LOG entry on every node, as (node, reason, object)."""
    out = []
    for nd in cluster.nodes:
        for e in nd.cmd("ACL", "LOG"):
            d = dict(zip(e[0::2], e[1::2]))
            out.append((nd.k, d.get(b"reason"), d.get(b"object"),
                        d.get(b"username")))
    return out


def _health(d):
    r = http(d.socket, "GET", "/v1/health", timeout=5.0)
    return r.status, r.json(), r.body.decode()


def _proc_text(d, what):
    with open("/proc/%d/%s" % (d.pid, what), "rb") as f:
        return f.read().decode(errors="replace")


def _eventually(fn, want):
    """fn() once it equals want, polled for up to 1 s (x SLOW): the daemon
    answers as soon as a quorum has, so the last node's write may still be
    on its way (one round trip more after a NOSCRIPT). Returns the last
    value."""
    got, _ = poll_until(lambda: (lambda v: v if v == want else None)(fn()),
                        1.0 * SLOW, 0.01)
    return got if got is not None else fn()


def _exercise(d, cluster):
    """Every command the daemon sends: acquire with a fence, extend, a
    waiter woken by a release (SUBSCRIBE, PUBLISH), complete, EVAL after
    a SCRIPT FLUSH, release."""
    res = rname("acl")
    key = lock_key(res)
    with d.client() as a, d.client(timeout=15.0) as b:
        r = a.call("acquire", resource=res, ttl_ms=20000, fence=True)
        assert_ok(r, "acquire as the ACL user")
        assert r.get("fence", 0) >= 1, r
        tok = r["lock"].encode()
        on = _eventually(lambda: _get_key(cluster, key), [tok] * 5)
        print("lock on the nodes: %r" % on)
        assert on == [tok] * 5, on
        assert_ok(a.call("extend", lock=r["lock"], ttl_ms=30000))
        b.send({"op": "acquire", "id": "w", "resource": res,
                "wait_ms": 10000, "ttl_ms": 20000})
        # The waiter queues and subscribes (as the user) before the release.
        subs, _ = poll_until(lambda: all(
            nd.cmd("PUBSUB", "NUMSUB", "redlock:wake:" + res)[1] > 0
            for nd in cluster.nodes), 3.0 * SLOW)
        assert subs, "the waiter did not subscribe on every node"
        assert_ok(a.call("release", lock=r["lock"]))
        w = b.response("w", timeout=10.0 * SLOW)
        assert_ok(w, "the waiter after the release")
        assert_ok(b.call("complete", lock=w["lock"], keep_ms=5000))
        done = [b"done:" + w["lock"].encode()] * 5
        assert _eventually(lambda: _get_key(cluster, key), done) == done
        # The script cache lost on one node: EVAL, then SCRIPT LOAD again.
        cluster.nodes[0].cmd("SCRIPT", "FLUSH")
        res2 = rname("acl2")
        r = a.call("acquire", resource=res2, ttl_ms=5000)
        assert_ok(r, "acquire after SCRIPT FLUSH")
        tok2 = r["lock"].encode()
        assert _eventually(lambda: cluster.nodes[0].cmd(
            "GET", lock_key(res2)), tok2) == tok2
        assert_ok(a.call("release", lock=r["lock"]))
        # A semaphore's permit (keys under redlock:sem:) and an inspection
        # (EVAL of GET and PTTL) as the user.
        p = a.call("acquire", resource=res2, permits=2, ttl_ms=20000)
        assert_ok(p, "a permit as the ACL user")
        skey = ("redlock:sem:%d:%s" % (p["permit"], res2)).encode()
        tok3 = p["lock"].encode()
        assert _eventually(lambda: cluster.nodes[0].cmd("GET", skey),
                           tok3) == tok3
        i = a.call("inspect", resource=res, fence=True)
        assert_ok(i, "inspect as the ACL user")
        assert i["state"] == "done" and i["fence"] >= 1, i
        assert_ok(a.call("release", lock=p["lock"], resource=res2))
    keys = cluster.keys_all("*")[:-1]
    for k, ks in enumerate(keys):
        assert all(x.startswith(b"redlock:lock:") or
                   x in (b"redlock:fence", b"redlock:dataset")
                   for x in ks), "node %d: %r" % (k + 1, ks)


def _no_secret(d, secret, texts):
    for what, text in texts.items():
        assert secret not in text, "the password shows in %s: %r" % (
            what, text[max(0, text.find(secret) - 80):
                       text.find(secret) + 40])
    print("password absent from %s" % ", ".join(sorted(texts)))


def test_acl_user_password_in_uri(cluster, xdaemons):
    pw = "aclpw-%s" % os.urandom(8).hex()
    _lock_down(cluster, pw)
    d = xdaemons.start(cluster, name="acl",
                       node_args=_node_args(cluster, "%s:%s" % (USER, pw)))
    st, h, htext = _health(d)
    print("health: %s" % htext)
    assert st == 200 and h["ok"] is True, h
    assert all(n["up"] and not n.get("last_error") for n in h["nodes"]), h
    _exercise(d, cluster)
    refused = _acl_refusals(cluster)
    print("ACL LOG entries: %r" % refused)
    assert refused == [], "the documented ACL user lacks rights: %r" % refused
    texts = {"health": htext,
             "metrics": http(d.socket, "GET", "/metrics").body.decode()}
    xdaemons.teardown()
    texts["log"] = d.stderr_text()
    _no_secret(d, pw, texts)


def test_acl_without_the_dataset_key_works_and_warns_once(cluster,
                                                          xdaemons):
    """An ACL from before the data-set mark (no ~redlock:dataset): every
    lock operation still works, and each node is named once in a warning
    that a FLUSHALL of it would go unseen, not again after a reconnect."""
    pw = "aclpw-%s" % os.urandom(8).hex()
    _lock_down(cluster, pw, without=("~redlock:dataset",))
    d = xdaemons.start(cluster, name="acldk",
                       node_args=_node_args(cluster, "%s:%s" % (USER, pw)))
    st, h, _ = _health(d)
    assert st == 200 and h["ok"] is True, h
    _exercise(d, cluster)
    cluster.nodes[0].cmd("CLIENT", "KILL", "USER", USER)
    d.wait_all_up(10.0 * SLOW)
    with d.client() as c:
        r = c.call("acquire", resource=rname("acldk"), ttl_ms=5000)
        assert_ok(r)
        assert_ok(c.call("release", lock=r["lock"]))
    log = d.stderr_text()
    for k in range(1, 6):
        assert log.count("node %d: " % k) >= 1
    warned = [ln for ln in log.splitlines()
              if "the data-set key redlock:dataset was refused (NOPERM" in ln]
    assert len(warned) == 5, warned
    assert sorted({ln.split("node ")[1][0] for ln in warned}) == \
        ["1", "2", "3", "4", "5"], warned
    xdaemons.teardown()


def _start_pw_elsewhere(cluster, xdaemons, how, pw, name, **kw):
    """A daemon naming only the user in its URIs, the password given by
    how: "file" (--redis-password-file) or "env" (REDLOCKD_REDIS_PASSWORD).
    """
    extra, env = [], {"REDLOCKD_REDIS_PASSWORD": ""}
    if how == "file":
        f = cluster.dir / ("%s.pw" % name)
        f.write_text(pw + "\n")
        os.chmod(f, 0o600)
        extra = ["--redis-password-file", str(f)]
    else:
        env = {"REDLOCKD_REDIS_PASSWORD": pw}
    return xdaemons.start(cluster, name=name, extra=extra, env=env,
                          node_args=_node_args(cluster, USER), **kw)


@pytest.mark.parametrize("how", ["file", "env"])
def test_acl_user_password_elsewhere(cluster, xdaemons, how):
    pw = "aclpw-%s" % os.urandom(8).hex()
    _lock_down(cluster, pw)
    d = _start_pw_elsewhere(cluster, xdaemons, how, pw, "acl" + how)
    st, h, htext = _health(d)
    assert st == 200 and h["ok"] is True, h
    _exercise(d, cluster)
    refused = _acl_refusals(cluster)
    assert refused == [], "the documented ACL user lacks rights: %r" % refused
    texts = {"cmdline": _proc_text(d, "cmdline"), "health": htext}
    xdaemons.teardown()
    texts["log"] = d.stderr_text()
    _no_secret(d, pw, texts)


@pytest.mark.parametrize("how", ["uri", "file", "env"])
def test_acl_wrong_password(cluster, xdaemons, how):
    pw = "aclpw-%s" % os.urandom(8).hex()
    bad = "wrongpw-%s" % os.urandom(8).hex()
    _lock_down(cluster, pw)
    ready = dict(ready=socket_listening)
    if how == "uri":
        d = xdaemons.start(cluster, name="aclbad",
                           node_args=_node_args(cluster, "%s:%s" % (USER,
                                                                    bad)),
                           **ready)
    else:
        d = _start_pw_elsewhere(cluster, xdaemons, how, bad, "aclbad" + how,
                                **ready)

    def all_refused():
        st, h, _ = _health(d)
        return h if all(n.get("last_error") for n in h["nodes"]) else None

    h, secs = poll_until(all_refused, 5.0 * SLOW, 0.05)
    st, h, htext = _health(d)
    print("health %d after %.0f ms: %s" % (st, secs * 1000, htext))
    assert st == 503 and h["ok"] is False, h
    for n in h["nodes"]:
        assert n["up"] is False, n
        assert "WRONGPASS" in (n.get("last_error") or ""), n
    with d.client() as c:
        assert_error(c.call("acquire", resource=rname("aclbad")),
                     "no_quorum")
    log = d.stderr_text()
    lines = [ln for ln in log.splitlines()
             if re.search(r"handshake failed: WRONGPASS", ln)]
    print("log: %s" % (lines[0] if lines else log[-2000:]))
    for nd in cluster.nodes:
        assert any(str(nd.path) in ln for ln in lines), \
            "no WRONGPASS line naming node %d:\n%s" % (nd.k, log[-3000:])
    texts = {"health": htext,
             "metrics": http(d.socket, "GET", "/metrics").body.decode()}
    if how != "uri":  # a URI in argv shows its password there: that is
        texts["cmdline"] = _proc_text(d, "cmdline")  # why the others exist
    xdaemons.teardown()
    texts["log"] = d.stderr_text()
    _no_secret(d, bad, texts)
    _no_secret(d, pw, texts)
    # The refusals are AUTH failures for our user, nothing else.
    refused = _acl_refusals(cluster)
    assert refused and all(r[1] == b"auth" and r[3] == USER.encode()
                           for r in refused), refused


def test_acl_user_without_password_is_refused():
    p = run_bin(["--node", "redis://%s@127.0.0.1:1" % USER],
                env={"REDLOCKD_REDIS_PASSWORD": ""})
    err = p.stderr.decode(errors="replace")
    print("exit %d: %s" % (p.returncode, err.strip()))
    assert p.returncode == 2, (p.returncode, err)
    assert "a user without a password" in err, err
    assert len(err.strip().splitlines()) == 1, err


def _start_locked_down(cluster, xdaemons, name):
    """A daemon on the five nodes as the documented ACL user, every node
    up: returns the user's password and the daemon."""
    pw = "aclpw-%s" % os.urandom(8).hex()
    _lock_down(cluster, pw)
    d = xdaemons.start(cluster, name=name,
                       node_args=_node_args(cluster, "%s:%s" % (USER, pw)))
    st, h, _ = _health(d)
    assert st == 200 and h["ok"] is True, h
    return pw, d


def test_acl_dataset_key_revoked_while_up_costs_that_turns_votes(cluster,
                                                                 xdaemons):
    """The mark's key taken from the user on a live connection: the GET
    after an acquire (the data-set guard) is refused, so nothing shows
    that no flush came before the acquire, and its vote must not count.
    The node is dropped, warned once, and comes back unguarded; the lock
    itself is won on the other four nodes."""
    pw, d = _start_locked_down(cluster, xdaemons, "aclrv")
    nd = cluster.nodes[0]
    rules = [r for r in _acl_rules(pw) if r != "~redlock:dataset"]
    assert nd.cmd("ACL", "SETUSER", USER, "resetkeys", *rules) == "OK"
    res = rname("aclrv")
    with d.client() as c:
        r = c.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(r, "won on the four other nodes")
        # The SET ran on node 1 (the guard comes after it), but its vote
        # was dropped with the connection.
        assert nd.cmd("GET", lock_key(res)) == r["lock"].encode()
        log, _ = poll_until(
            lambda: (lambda t: t if "data-set guard was refused" in t
                     else None)(d.stderr_text()), 5.0 * SLOW)
        assert log, d.stderr_tail(30)
        assert "node 1: " in [ln for ln in log.splitlines()
                              if "data-set guard was refused" in ln][0]
        assert_ok(c.call("release", lock=r["lock"]))
    d.wait_all_up(10.0 * SLOW)
    with d.client() as c:
        for _ in range(3):
            r = c.call("acquire", resource=rname("aclrv2"), ttl_ms=5000)
            assert_ok(r)
            assert_ok(c.call("release", lock=r["lock"]))
    log = d.stderr_text()
    assert log.count("data-set guard was refused") == 1, log
    warned = [ln for ln in log.splitlines()
              if "the data-set key redlock:dataset was refused (NOPERM" in ln]
    assert len(warned) == 1 and "node 1: " in warned[0], warned
    xdaemons.teardown()


def test_acl_script_load_refused_after_noscript_names_why(cluster, xdaemons):
    """SCRIPT LOAD taken from the user on a live connection, then SCRIPT
    FLUSH: the release meets NOSCRIPT, goes again as EVAL, and the
    reload of the scripts is refused. The log says so once, with the
    node's error text and how many of the scripts failed, not only that
    one of them did."""
    _, d = _start_locked_down(cluster, xdaemons, "aclsl")
    nd = cluster.nodes[0]
    assert nd.cmd("ACL", "SETUSER", USER, "-script|load") == "OK"
    assert nd.cmd("SCRIPT", "FLUSH") == "OK"
    with d.client() as c:
        r = c.call("acquire", resource=rname("aclsl"), ttl_ms=20000)
        assert_ok(r)
        assert_ok(c.call("release", lock=r["lock"]))

    def failed():
        lines = [ln for ln in d.stderr_text().splitlines()
                 if "SCRIPT LOAD after NOSCRIPT failed" in ln]
        return lines or None

    lines, _ = poll_until(failed, 5.0 * SLOW)
    assert lines, d.stderr_tail(30)
    print("log: %s" % lines[0])
    assert len(lines) == 1, lines
    m = re.search(r"node 1: .*failed for (\d+) of (\d+) scripts \(NOPERM",
                  lines[0])
    assert m and m.group(1) == m.group(2), lines[0]
    xdaemons.teardown()


def _lines_with(d, text):
    return [ln for ln in d.stderr_text().splitlines() if text in ln]


def _info_refusals(nd):
    """How many INFO commands the node's ACL LOG says it refused."""
    n = 0
    for e in nd.cmd("ACL", "LOG"):
        f = dict(zip(e[0::2], e[1::2]))
        if f.get(b"object", b"").startswith(b"info"):
            n += int(f.get(b"count", 1))
    return n


def test_acl_info_revoked_while_up_takes_the_node_out(cluster, xdaemons):
    """INFO taken from the user on a live connection: the replication id
    check every second (how a node that synced from a master is seen)
    cannot run, so the node must not go on counting as if it had. It is
    named once with the node's refusal and dropped; its handshake, which
    needs INFO, keeps it down, and locks go on over the four others. With
    INFO allowed again, it comes back."""
    pw, d = _start_locked_down(cluster, xdaemons, "aclinfo")
    nd = cluster.nodes[0]
    assert nd.cmd("ACL", "SETUSER", USER, "-info") == "OK"
    want = "INFO replication was refused (NOPERM"
    lines, _ = poll_until(lambda: _lines_with(d, want), 5.0 * SLOW)
    assert lines, d.stderr_tail(30)
    print("log: %s" % lines[0])
    assert "node 1: " in lines[0], lines

    def node1_down():
        n = d.health()["nodes"][0]
        return n if n.get("up") is False else None

    n, _ = poll_until(node1_down, 5.0 * SLOW)
    assert n and "NOPERM" in (n.get("last_error") or ""), d.health()
    with d.client() as c:
        r = c.call("acquire", resource=rname("aclinfo"), ttl_ms=5000)
        assert_ok(r, "won on the four other nodes")
        assert nd.cmd("GET", lock_key(rname("aclinfo"))) is None
        assert_ok(c.call("release", lock=r["lock"]))
    assert nd.cmd("ACL", "SETUSER", USER, "+info") == "OK"
    d.wait_all_up(10.0 * SLOW)
    assert len(_lines_with(d, want)) == 1, _lines_with(d, want)
    xdaemons.teardown()


def test_acl_info_memory_revoked_while_up_is_told_once(cluster, xdaemons):
    """Only INFO memory taken from the user on a live connection: the
    eviction check cannot run, which costs no vote (a node that may evict
    counts too), so the node stays up, named once with its refusal however
    often the check is refused again."""
    _, d = _start_locked_down(cluster, xdaemons, "aclmem")
    nd = cluster.nodes[0]
    assert nd.cmd("ACL", "SETUSER", USER, "-info", "+info|server",
                  "+info|replication", "+info|persistence") == "OK"
    assert nd.cmd("ACL", "LOG", "RESET") == "OK"
    n, _ = poll_until(lambda: _info_refusals(nd) >= 2 or None,
                      15.0 * SLOW, 0.1)
    assert n, (_info_refusals(nd), d.stderr_tail(30))
    lines = _lines_with(d, "INFO memory was refused (NOPERM")
    print("log: %r" % lines)
    assert len(lines) == 1 and "node 1: " in lines[0], lines
    assert "the eviction check cannot run" in lines[0], lines
    h = d.health()
    assert h["ok"] is True and h["nodes"][0]["up"] is True, h
    xdaemons.teardown()
