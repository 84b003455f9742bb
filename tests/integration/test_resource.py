"""Release/extend with an explicit "resource" act on a
lock taken through ANOTHER daemon process; a wrong token does nothing."""

from rl import TOKEN_RE, assert_error, assert_ok, lock_key, rname


def test_release_through_other_daemon(cluster, daemon, daemon_factory):
    other = daemon_factory.start(cluster, name="other")
    res = rname("xr")
    key = lock_key(res)
    with daemon.client() as a, other.client() as b:
        tok = a.call("acquire", resource=res, ttl_ms=60000)["lock"]
        assert TOKEN_RE.match(tok)
        assert cluster.get_all(key) == [tok.encode()] * 5
        # Without the resource the other daemon does not know the token.
        assert_error(b.call("release", lock=tok), "not_held")
        assert cluster.get_all(key) == [tok.encode()] * 5
        # With it, it releases on every node.
        assert_ok(b.call("release", lock=tok, resource=res),
                  "release via other daemon")
        assert cluster.get_all(key) == [None] * 5
        # The first daemon's lock is gone underneath it.
        assert_error(a.call("release", lock=tok), "not_held")
        assert_error(b.call("release", lock=tok, resource=res), "not_held")


def test_extend_through_other_daemon(cluster, daemon, daemon_factory):
    other = daemon_factory.start(cluster, name="other")
    res = rname("xe")
    key = lock_key(res)
    with daemon.client() as a, other.client() as b:
        tok = a.call("acquire", resource=res, ttl_ms=5000)["lock"]
        r = b.call("extend", lock=tok, resource=res, ttl_ms=60000)
        assert_ok(r, "extend via other daemon")
        pttls = cluster.pttl_all(key)
        assert all(isinstance(p, int) and 5000 < p <= 60000
                   for p in pttls), pttls
        assert cluster.get_all(key) == [tok.encode()] * 5
        assert_ok(a.call("release", lock=tok))
        assert cluster.get_all(key) == [None] * 5


def test_wrong_token_right_resource(cluster, daemon, daemon_factory):
    other = daemon_factory.start(cluster, name="other")
    res = rname("xw")
    key = lock_key(res)
    with daemon.client() as a, other.client() as b:
        tok = a.call("acquire", resource=res, ttl_ms=20000)["lock"]
        wrong = ("%032x" % (int(tok, 16) ^ 1))
        before = cluster.pttl_all(key)
        for d in (a, b):
            assert_error(d.call("release", lock=wrong, resource=res),
                         "not_held")
            assert_error(d.call("extend", lock=wrong, resource=res,
                                ttl_ms=60000), "not_held")
        assert cluster.get_all(key) == [tok.encode()] * 5
        after = cluster.pttl_all(key)
        for p0, p1 in zip(before, after):
            assert p1 <= p0, ("a wrong token extended the lock: %r -> %r"
                              % (before, after))
        # The right resource with a wrong token did not disturb the owner.
        assert_ok(a.call("extend", lock=tok, ttl_ms=30000))
        assert_ok(a.call("release", lock=tok))
        assert cluster.get_all(key) == [None] * 5
