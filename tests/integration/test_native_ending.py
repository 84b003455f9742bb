"""Extend and release through a server's native compare-and-set and
compare-and-delete, where its command table lists them: `SET key token
IFEQ token PX ttl` for an extend (Valkey 8.1, Redis 8.4), `DELIFEQ key
token` (Valkey 9.0) or `DELEX key IFEQ token` (Redis 8.4) for a release
that announces nothing. Every test runs on whatever server the suite
starts (the compat suite runs it on Valkey 8.1 too), answers as the
scripts do, and checks from the nodes' INFO commandstats which form ran.
The compare-and-delete servers do not run here: those paths run against
this machine's redis-server with tests/modules/delifeq.c loaded, which
adds DELIFEQ (or DELEX), and against it without the module (the
scripts)."""

import shutil
import subprocess
from pathlib import Path

import rl
from rl import (Cluster, assert_error, assert_ok, lock_key, poll_until,
                pytest, rname)
from test_native_acquire import _reset, _stats

HERE = Path(__file__).resolve().parent
MODULE_SRC = HERE.parent / "modules" / "delifeq.c"
OTHER = "f" * 32


def _set_ifeq(cluster):
    """How many nodes' COMMAND DOCS SET list IFEQ (an error, before 7.0,
    is no): a mixed set has some."""
    n = 0
    for r in cluster.each("COMMAND", "DOCS", "SET"):
        n += 0 if isinstance(r, Exception) else b"IFEQ" in repr(r).encode()
    return n


def _extend_calls(cluster, native, n):
    """n extends went natively on the native nodes (a SET each) and as
    scripts on the others: one each, or one batch script for many."""
    calls = _stats(cluster)
    assert calls.get("set", 0) == native * n, calls
    scripts = calls.get("evalsha", 0)
    assert 5 - native <= scripts <= (5 - native) * n, calls


def test_extend_and_its_refusals(cluster, daemon):
    native = _set_ifeq(cluster)
    res = rname("natext")
    key = lock_key(res)
    with daemon.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=5000)["lock"]
        _reset(cluster)
        assert_ok(c.call("extend", lock=tok, ttl_ms=60000), "extend")
        for p in cluster.pttl_all(key):
            assert 50000 < p <= 60000, cluster.pttl_all(key)
        _extend_calls(cluster, native, 1)
        # another token on every node: refused, the key left alone
        cluster.each("SET", key, OTHER, "PX", 30000)
        _reset(cluster)
        assert_error(c.call("extend", lock=tok, ttl_ms=60000), "not_held")
        assert cluster.get_all(key) == [OTHER.encode()] * 5
        for p in cluster.pttl_all(key):
            assert p <= 30000, cluster.pttl_all(key)
        _extend_calls(cluster, native, 1)
    # a done mark is no lock of that token either
    res = rname("natextdone")
    key = lock_key(res)
    with daemon.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=5000)["lock"]
        assert_ok(c.call("complete", lock=tok, keep_ms=30000))
        cluster.each("SET", key, "done:" + tok, "PX", 30000)
        _reset(cluster)
        r = c.call("extend", lock=tok, resource=res, ttl_ms=60000)
        assert_error(r, "not_held")
        assert cluster.get_all(key) == [b"done:" + tok.encode()] * 5
        for p in cluster.pttl_all(key):
            assert p <= 30000, cluster.pttl_all(key)


def test_extends_of_one_turn_go_natively(cluster, daemon):
    """Extends written at once share a loop turn: natively, one SET each
    per node (cheaper for the server than one batch script, see
    batch_goes_native), else one batch script per node."""
    native = _set_ifeq(cluster)
    n = 8
    with daemon.client() as c:
        toks = []
        for k in range(n):
            toks.append(c.call("acquire", resource=rname("natbx%d" % k),
                               ttl_ms=5000)["lock"])
        _reset(cluster)
        answers, _ = c.pipeline([{"id": "x%d" % k, "op": "extend",
                                  "lock": t, "ttl_ms": 60000}
                                 for k, t in enumerate(toks)])
        for rs in answers.values():
            assert len(rs) == 1, answers
            assert_ok(rs[0], "extend")
        _extend_calls(cluster, native, n)
        if native < 5:
            assert _stats(cluster).get("evalsha", 0) < 5 * n
        for t in toks:
            assert_ok(c.call("release", lock=t))


# ---- compare-and-delete, through the test module -------------------------

@pytest.fixture(scope="module")
def module_so(tmp_path_factory):
    if rl.REDIS_SERVER != "redis-server":
        pytest.skip("the test module is for this machine's redis-server")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the test module")
    so = tmp_path_factory.mktemp("mod") / "delifeq.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(so),
                    str(MODULE_SRC)], check=True, timeout=60)
    return so


@pytest.fixture(params=["script", "DELIFEQ", "DELEX"])
def del_cluster(request, module_so):
    """Five nodes of this machine's redis-server, with the module loaded
    as DELIFEQ or DELEX, or without it."""
    c = Cluster(5)
    if request.param != "script":
        args = ["--loadmodule", str(module_so)]
        if request.param == "DELEX":
            args.append("DELEX")
        for nd in c.nodes:
            nd.server_args = lambda a=args: list(a)
    c.start()
    try:
        yield request.param, c
    finally:
        c.stop()


def _release_calls(cluster, form, native_n):
    calls = _stats(cluster)
    if form == "script":
        assert calls.get("delifeq", 0) == calls.get("delex", 0) == 0, calls
    else:
        assert calls.get(form.lower(), 0) == native_n, calls
    return calls


def test_release_natively_where_it_announces_nothing(del_cluster,
                                                     daemon_factory):
    form, cluster = del_cluster
    d = daemon_factory.start(cluster, name="d-" + form)
    res = rname("natrel")
    key = lock_key(res)
    with d.client() as c:
        tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
        _reset(cluster)
        assert_ok(c.call("release", lock=tok), "release")
        assert cluster.get_all(key) == [None] * 5
        # Three nodes announce the release (n - quorum + 1): their script
        # deletes and publishes in one call; the two others delete
        # natively.
        calls = _release_calls(cluster, form, 0 if form == "script" else 2)
        assert calls.get("publish", 0) == 3, calls
        assert calls.get("evalsha", 0) == (5 if form == "script" else 3), \
            calls
        # another token on every node: refused, the key left alone
        tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
        cluster.each("SET", key, OTHER, "PX", 30000)
        _reset(cluster)
        assert_error(c.call("release", lock=tok), "not_held")
        assert cluster.get_all(key) == [OTHER.encode()] * 5
        _release_calls(cluster, form, 0 if form == "script" else 2)
        # a key of another type: that node's error, the others as ever
        cluster.each("DEL", key)
        tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
        for nd in cluster.nodes:
            nd.cmd("DEL", key)
            nd.cmd("HSET", key, "f", "v")
        assert_error(c.call("release", lock=tok), "no_quorum")
        assert [str(t) for t in cluster.each("TYPE", key)] == ["hash"] * 5


def test_rollback_goes_natively(del_cluster, daemon_factory):
    """A lost acquire's rollback announces nothing: natively on every node
    it goes to."""
    form, cluster = del_cluster
    d = daemon_factory.start(cluster, name="d-" + form)
    res = rname("natrb")
    key = lock_key(res)
    for nd in cluster.nodes[:3]:
        nd.cmd("SET", key, OTHER, "PX", 30000)
    _reset(cluster)
    with d.client() as c:
        assert_error(c.call("acquire", resource=res, ttl_ms=20000), "busy")
    poll_until(lambda: cluster.get_all(key) == [OTHER.encode()] * 3 +
               [None] * 2, 3.0, what="rollback on the free nodes")
    calls = _stats(cluster)
    if form == "script":
        assert calls.get("evalsha", 0) >= 2, calls
    else:
        # every node a rollback may reach, the three held ones refusing
        assert 2 <= calls.get(form.lower(), 0) <= 5, calls
        assert calls.get("evalsha", 0) == 0, calls


def test_release_refused_by_the_acl_falls_back_to_the_script(
        del_cluster, daemon_factory):
    """A user allowed the scripts but not DELIFEQ (or DELEX): a release
    still counts where the scripts ran (the refusing node keeps the key to
    its TTL, as a node that failed), and each refusing node's releases
    take the script from then on, with a warning. Five releases give each
    node a turn without announcing."""
    form, cluster = del_cluster
    if form == "script":
        pytest.skip("no native release to refuse")
    cluster.each("ACL", "SETUSER", "default", "-" + form.lower())
    d = daemon_factory.start(cluster, name="d-" + form)
    with d.client() as c:
        for k in range(5):
            tok = c.call("acquire", resource=rname("natacl"),
                         ttl_ms=20000)["lock"]
            assert_ok(c.call("release", lock=tok), "release")
        poll_until(lambda: "native command refused" in d.stderr_text(), 3.0,
                   what="the warning")
        _reset(cluster)
        for k in range(3):
            res = rname("natacl")
            tok = c.call("acquire", resource=res, ttl_ms=20000)["lock"]
            assert_ok(c.call("release", lock=tok), "release")
            assert cluster.get_all(lock_key(res)) == [None] * 5
    calls = _stats(cluster)
    assert calls.get(form.lower(), 0) == 0, calls
    assert calls.get("evalsha", 0) >= 3 * 3, calls
