"""200 pipelined requests in one write, each answered
exactly once and matched by id."""

from rl import Client, TOKEN_RE, lock_key, rname


def test_pipeline_200(cluster_mod, daemon_mod):
    tag = rname("pipe")
    with daemon_mod.client(timeout=10.0) as c:
        # Locks to release inside the big batch, taken with a pipeline too.
        pre = [{"op": "acquire", "resource": "%s-pre-%d" % (tag, i),
                "ttl_ms": 60000, "id": "pre%d" % i} for i in range(50)]
        answers, extra = c.pipeline(pre)
        assert not extra, extra
        held = {}
        for o in pre:
            got = answers[Client.key(o["id"])]
            assert len(got) == 1 and got[0].get("ok") is True, got
            held[o["resource"]] = got[0]["lock"]

        batch = []
        kinds = {}
        n_acq = 0
        for i, (res, tok) in enumerate(held.items()):
            batch.append({"op": "release", "lock": tok, "id": 1000 + i})
        while len(batch) < 200:
            i = len(batch)
            if i % 2:
                batch.append({"op": "ping", "id": "p%d" % i})
            else:
                batch.append({"op": "acquire", "ttl_ms": 60000,
                              "resource": "%s-new-%d" % (tag, i),
                              "id": "a%d" % i})
                n_acq += 1
        # Interleave so that the kinds are mixed on the wire.
        batch = [batch[j] for k in range(4) for j in range(k, 200, 4)]
        for o in batch:
            kinds[Client.key(o["id"])] = o
        assert len(batch) == 200 and len(kinds) == 200

        answers, extra = c.pipeline(batch, timeout=20.0)
        missing = [k for k, v in answers.items() if len(v) == 0]
        dup = {k: v for k, v in answers.items() if len(v) > 1}
        assert not missing, "%d unanswered ids: %r" % (len(missing),
                                                       missing[:10])
        assert not dup, "answered more than once: %r" % list(dup)[:10]
        assert not extra, "responses with unknown ids: %r" % extra[:5]

        new_locks = {}
        for k, got in answers.items():
            req, rsp = kinds[k], got[0]
            assert rsp.get("ok") is True, (req, rsp)
            if req["op"] == "acquire":
                assert rsp.get("resource") == req["resource"], (req, rsp)
                assert TOKEN_RE.match(rsp.get("lock", "")), rsp
                new_locks[req["resource"]] = rsp["lock"]
        assert len(new_locks) == n_acq
        assert len(set(new_locks.values())) == n_acq

        # Nothing more comes: the next answer is the sentinel's.
        c.send({"op": "ping", "id": "sentinel"})
        nxt = c.read_msg(5.0)
        assert nxt.get("id") == "sentinel", (
            "extra response after the batch: %r" % nxt)

        for res in held:
            assert cluster_mod.get_all(lock_key(res)) == [None] * 5, res
        for res, tok in new_locks.items():
            assert cluster_mod.get_all(lock_key(res)) == [tok.encode()] * 5

        rel = [{"op": "release", "lock": tok, "id": "r%d" % i}
               for i, tok in enumerate(new_locks.values())]
        answers, extra = c.pipeline(rel)
        assert all(len(v) == 1 and v[0].get("ok") is True
                   for v in answers.values()), answers
        for res in new_locks:
            assert cluster_mod.get_all(lock_key(res)) == [None] * 5, res


def test_pipeline_same_resource_one_winner(cluster_mod, daemon_mod):
    """Ten pipelined acquires of one resource: exactly one wins, the rest
    are busy."""
    res = rname("race")
    with daemon_mod.client() as c:
        reqs = [{"op": "acquire", "resource": res, "id": i}
                for i in range(10)]
        answers, extra = c.pipeline(reqs)
        rsps = [v[0] for v in answers.values()]
        wins = [r for r in rsps if r.get("ok") is True]
        assert len(wins) == 1, rsps
        for r in rsps:
            if r is not wins[0]:
                assert r["error"]["code"] == "busy", r
        assert cluster_mod.get_all(lock_key(res)) == \
            [wins[0]["lock"].encode()] * 5
        assert c.call("release", lock=wins[0]["lock"])["ok"] is True
