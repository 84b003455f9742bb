"""test_node_limits.py: a node that lacks something the daemon needs.

Node 1 of five real redis-servers is started with a command renamed away
(`rename-command X ""`) or with an ACL user short of a command; the other
four are whole. What a client sees (answers, health) and the one line the
daemon logs for it, as docs/operations.md ("Known limits") quotes them:

- EVALSHA renamed away, or not allowed to the ACL user: the node comes up
  (SCRIPT LOAD still answers) and its native acquires count, but every
  script there fails: one "scripts refused" line names the command, and a
  released lock's key lives out its ttl on that node;
- a command a script calls (PUBLISH) renamed away: the same line, without
  a command's name (the server does not give it);
- SCRIPT or INFO renamed away: the handshake fails, the node is down, and
  health's last_error names the command first;
- an ACL user without the lock keys: the same line, for a key;
- MULTI renamed away: fenced acquires there take the script, told once;
- SET renamed away: the data-set mark cannot be set, the node is up but
  "not_counted";
- SUBSCRIBE renamed away: waiters there poll instead of being woken;
- CLIENT renamed away: nothing changes (the daemon never sends it)."""

import contextlib
import time

from rl import (Cluster, Daemon, assert_ok, lock_key, need_redis,
                poll_until, pytest, rname)

REFUSED = "scripts refused: "
MISSING = "is renamed away or disabled here"


@contextlib.contextmanager
def one_limited_node(node1_extra=(), uri1=None):
    """Five nodes, node 1 started with node1_extra, and a daemon on them
    (node 1 by uri1(node) when given). Yields (cluster, daemon)."""
    c = Cluster(5)
    d = None
    try:
        c.nodes[0].start(extra=list(node1_extra))
        for nd in c.nodes[1:]:
            nd.start()
        args = []
        for k, nd in enumerate(c.nodes):
            args += ["--node", uri1(nd) if (k == 0 and uri1) else nd.uri]
        d = Daemon(c, node_args=args)
        d.start(wait_nodes=False)
        yield c, d
    finally:
        if d is not None:
            code, _ = d.stop()
            assert code == 0, d.stderr_tail(60)
        c.stop()


def need_channel_rules():
    """Skips on servers before 6.2, which would not start with a user of
    channel rules (asked of a node of their own)."""
    probe = Cluster(1)
    try:
        probe.nodes[0].start()
        need_redis(probe.nodes, (6, 2), "an ACL user with channel rules")
    finally:
        probe.stop()


def renamed(cmd):
    return ["--rename-command", cmd, ""]


def node1(d):
    return d.health()["nodes"][0]


def wait_node1(d, pred, what, bound=10.0):
    n, _ = poll_until(lambda: (lambda n: n if pred(n) else None)(node1(d)),
                      bound, 0.05, what)
    assert n, "%s: %r\n%s" % (what, node1(d), d.stderr_tail(40))
    return n


def wait_others_up(d, bound=10.0):
    ok, _ = poll_until(lambda: all(n["up"] for n in d.health()["nodes"][1:]),
                       bound, 0.05, "nodes 2 to 5 up")
    assert ok, d.health()


def lines(d, text, level="WARN  node 1: "):
    """The daemon's log lines of node 1 at level that hold text."""
    return [ln for ln in d.stderr_text().splitlines()
            if text in ln and level in ln]


def wait_line(d, text, level="WARN  node 1: "):
    got, _ = poll_until(lambda: lines(d, text, level), 5.0, 0.05, text)
    assert got, "no line %r:\n%s" % (text, d.stderr_tail(40))


def cycles(d, n):
    """n acquire/release cycles, each answered ok; returns the resources."""
    out = []
    with d.client() as c:
        for _ in range(n):
            res = rname("lim")
            a = c.call("acquire", resource=res, ttl_ms=30000)
            assert_ok(a, "acquire")
            assert_ok(c.call("release", resource=res, lock=a["lock"]),
                      "release")
            out.append(res)
    return out


def told_once(d, text):
    """The line about text is there, once, after more cycles than the one
    that met the refusal first."""
    wait_line(d, text)
    cycles(d, 2)
    time.sleep(0.3)
    assert len(lines(d, text)) == 1, d.stderr_tail(40)


def test_evalsha_renamed_is_named_once_and_acquires_still_count():
    with one_limited_node(renamed("EVALSHA")) as (c, d):
        n = wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        assert "not_counted" not in n
        res = cycles(d, 3)
        # Releases are scripts: on Redis 7.0 and later, whose acquire is
        # the native SET, the released lock's key stays on node 1 only.
        if c.nodes[0].redis_version() >= (7, 0):
            assert c.nodes[0].cmd("EXISTS", lock_key(res[0])) == 1
        assert c.nodes[1].cmd("EXISTS", lock_key(res[0])) == 0
        told_once(d, REFUSED + "EVALSHA " + MISSING)
        assert node1(d)["up"] is True


def test_evalsha_not_allowed_to_the_acl_user_is_named_once():
    need_channel_rules()
    acl = ["--user", "rl", "on", ">pw", "~*", "allchannels", "+@all",
           "-evalsha"]
    with one_limited_node(acl, uri1=lambda nd: "unix://rl:pw@%s" % nd.path
                          ) as (c, d):
        wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        cycles(d, 3)
        told_once(d, REFUSED + "EVALSHA is not allowed to the ACL user "
                  "(NOPERM")
        assert node1(d)["up"] is True


def test_lock_keys_outside_the_acl_user_patterns_are_named_once():
    """An ACL user with the mark and the fence counter but no lock keys:
    the node comes up and counts, its native acquires are refused (the
    acquire's own line) and its scripts too (the line below)."""
    need_channel_rules()
    acl = ["--user", "rl", "on", ">pw", "~redlock:dataset", "~redlock:fence",
           "allchannels", "+@all"]
    with one_limited_node(acl, uri1=lambda nd: "unix://rl:pw@%s" % nd.path
                          ) as (c, d):
        n = wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        assert "not_counted" not in n
        res = cycles(d, 3)
        assert c.nodes[0].cmd("EXISTS", lock_key(res[0])) == 0
        told_once(d, REFUSED + "a command needs a key or channel the ACL "
                  "denies (")


def test_multi_renamed_makes_fenced_acquires_use_the_script():
    with one_limited_node(renamed("MULTI")) as (c, d):
        wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        need_redis(c.nodes[:1], (7, 0), "the native acquire")
        with d.client() as cl:
            for _ in range(3):
                a = cl.call("acquire", resource=rname("f"), ttl_ms=30000,
                            fence=True)
                assert_ok(a, "fenced acquire")
        text = ("fenced acquire falls back to the script (MULTI/EXEC "
                "failed; an ACL needs +multi +exec)")
        wait_line(d, text, level="WARN  redlockd: node 1: ")
        assert len(lines(d, text, "node 1: ")) == 1, d.stderr_tail(40)


def test_a_command_the_scripts_call_renamed_is_named_once():
    """PUBLISH renamed: a release that wakes a waiter fails on node 1 (the
    other four publish, so the waiter still gets the lock at once)."""
    with one_limited_node(renamed("PUBLISH")) as (c, d):
        wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        text = REFUSED + "a command " + MISSING
        for k in range(3):
            res = rname("pub")
            with d.client() as holder, d.client() as waiter:
                a = holder.call("acquire", resource=res, ttl_ms=30000)
                assert_ok(a, "acquire")
                waiter.send({"op": "acquire", "id": "w%d" % k,
                             "resource": res, "ttl_ms": 30000,
                             "wait_ms": 20000})
                time.sleep(0.3)
                assert_ok(holder.call("release", resource=res,
                                      lock=a["lock"]), "release")
                w = waiter.response("w%d" % k, timeout=10)
                assert_ok(w, "the waiter's acquire")
                assert_ok(waiter.call("release", resource=res,
                                      lock=w["lock"]), "release")
        wait_line(d, text)
        assert len(lines(d, text)) == 1, d.stderr_tail(40)


@pytest.mark.parametrize("cmd", ["SCRIPT", "INFO"])
def test_a_handshake_command_renamed_keeps_the_node_down_and_names_it(cmd):
    with one_limited_node(renamed(cmd)) as (c, d):
        wait_others_up(d)
        n = wait_node1(d, lambda n: n["last_error"], "node 1's error")
        assert n["up"] is False
        told = "handshake failed: %s %s" % (cmd, MISSING)
        assert n["last_error"].startswith(told + ": ERR unknown command"), n
        cycles(d, 2)
        time.sleep(2.5)  # a few more attempts, each refused alike
        assert len(lines(d, told)) == 1, d.stderr_tail(40)


def test_set_renamed_leaves_the_node_up_but_not_counted():
    with one_limited_node(renamed("SET")) as (c, d):
        wait_others_up(d)
        n = wait_node1(d, lambda n: n["up"] and n.get("not_counted"),
                       "node 1 up, not counted")
        assert n["not_counted"].startswith(
            "data-set key: SET refused (ERR unknown command"), n
        cycles(d, 2)
        wait_line(d, "no data-set mark (data-set key: SET refused (ERR "
                  "unknown command")


def test_subscribe_renamed_makes_waiters_poll():
    with one_limited_node(renamed("SUBSCRIBE")) as (c, d):
        wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        res = rname("sub")
        with d.client() as holder, d.client() as waiter:
            a = holder.call("acquire", resource=res, ttl_ms=30000)
            assert_ok(a, "acquire")
            waiter.send({"op": "acquire", "id": "w", "resource": res,
                         "ttl_ms": 30000, "wait_ms": 20000})
            wait_line(d, "SUBSCRIBE refused (waiters poll): ERR unknown "
                      "command", level="WARN  redlockd: node 1: ")
            assert "until SUBSCRIBE and the channels redlock:wake:* are " \
                "allowed" in lines(d, "SUBSCRIBE refused", "node 1: ")[0]
            assert_ok(holder.call("release", resource=res, lock=a["lock"]),
                      "release")
            assert_ok(waiter.response("w", timeout=15), "the waiter")


def test_client_renamed_changes_nothing():
    with one_limited_node(renamed("CLIENT")) as (c, d):
        wait_node1(d, lambda n: n["up"], "node 1 up")
        wait_others_up(d)
        cycles(d, 3)
        n = node1(d)
        assert n["up"] is True and "not_counted" not in n, n
        assert not [ln for ln in d.stderr_text().splitlines()
                    if "WARN" in ln and "node 1" in ln], d.stderr_tail(40)
