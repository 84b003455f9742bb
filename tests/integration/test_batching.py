"""Release, extend and complete from many clients in one
loop turn go to each node as one script over their keys, and every key is
still compare-and-act on its own token: right tokens act, wrong ones are
not_held, and one key that meets an error fails alone."""

import re
import threading

from rl import Client, assert_ok, lock_key, pytest, rname

# Per lock, the requests sent together: (op, token, fields, answer), where
# the token is the lock's ("right"), another ("wrong"), or another on the
# resource whose key is not a string ("bad").
PLAN = [
    [("extend", "right", {"ttl_ms": 60000}, "ok"),
     ("release", "wrong", {}, "not_held")],
    [("extend", "wrong", {"ttl_ms": 60000}, "not_held"),
     ("release", "right", {}, "ok")],
    [("complete", "wrong", {"keep_ms": 60000}, "not_held"),
     ("complete", "right", {"keep_ms": 60000}, "ok")],
    # the same key twice in one turn: applied in the order sent
    [("extend", "right", {"ttl_ms": 60000}, "ok"),
     ("release", "right", {}, "ok")],
    [("release", "bad", {}, "no_quorum"),
     ("extend", "bad", {"ttl_ms": 5000}, "no_quorum"),
     ("release", "right", {}, "ok")],
]
CLIENTS = 6
PER_CLIENT = 12  # locks per client; each gets three requests at once


def _evalsha_calls(cluster):
    n = 0
    for info in cluster.each("INFO", "commandstats"):
        m = re.search(r"cmdstat_evalsha:calls=(\d+)", info.decode())
        n += int(m.group(1)) if m else 0
    return n


def _code(r):
    return "ok" if r.get("ok") is True else r["error"]["code"]


@pytest.mark.parametrize("extra", [(), ("--acquire-script",)],
                         ids=["native", "script"])
def test_batched_ops_answer_per_key(cluster, daemon_factory, extra):
    d = daemon_factory.start(cluster, name="db", extra=extra)
    wrong = "0" * 32
    # One resource whose key is a hash on every node: each script call on
    # it meets WRONGTYPE.
    bad = rname("bad")
    cluster.each("HSET", lock_key(bad), "f", "v")
    plans = []  # per client: [(request, expected code, check)]
    held = {}
    # The owner's session stays open: its locks would be released with it.
    owner = d.client()
    for k in range(CLIENTS):
        plan = []
        for j in range(PER_CLIENT):
            res = rname("b%d-%d" % (k, j))
            r = owner.call("acquire", resource=res, ttl_ms=20000)
            assert_ok(r, "acquire")
            tok = r["lock"]
            held[res] = tok
            for op, who, fields, want in PLAN[j % len(PLAN)]:
                req = dict(op=op, **fields)
                req["lock"] = tok if who == "right" else wrong
                req["resource"] = bad if who == "bad" else res
                plan.append((req, want))
        plans.append(plan)
    cluster.each("CONFIG", "RESETSTAT")
    results = [None] * CLIENTS
    errors = []
    go = threading.Barrier(CLIENTS)

    def run(k):
        try:
            with d.client(timeout=15) as c:
                objs = []
                for n, (req, _) in enumerate(plans[k]):
                    objs.append(dict(req, id="c%d-%d" % (k, n)))
                go.wait(10)
                answers, extra = c.pipeline(objs, timeout=15)
                results[k] = (objs, answers, extra)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(k,)) for k in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors, errors
    n_ops = 0
    for k in range(CLIENTS):
        objs, answers, extra = results[k]
        for (req, want), obj in zip(plans[k], objs):
            got = answers[Client.key(obj["id"])]
            assert len(got) == 1, (obj, got)
            assert _code(got[0]) == want, (req, want, got[0])
            n_ops += 1
    # Fewer script calls than requests per node: they were batched.
    calls = _evalsha_calls(cluster)
    print("%d requests -> %d EVALSHA over 5 nodes" % (n_ops, calls))
    assert calls < 5 * n_ops / 2, calls
    # The nodes say the same as the answers.
    for res, tok in held.items():
        vals = cluster.get_all(lock_key(res))
        assert all(v in (tok.encode(), None, b"done:" + tok.encode())
                   for v in vals), (res, vals)
    last = {}  # resource -> the last request that acted on it
    for k in range(CLIENTS):
        for req, want in plans[k]:
            if req["resource"] != bad and want == "ok":
                last[req["resource"]] = req
    for res, req in last.items():
        key = lock_key(res)
        tok = held[res].encode()
        if req["op"] == "extend":
            assert cluster.get_all(key) == [tok] * 5
            for p in cluster.pttl_all(key):
                assert 20000 < p <= 60000, cluster.pttl_all(key)
        elif req["op"] == "release":
            assert cluster.get_all(key) == [None] * 5
        else:
            assert cluster.get_all(key) == [b"done:" + tok] * 5
    # the broken key was left as it was
    assert cluster.each("TYPE", lock_key(bad)) == ["hash"] * 5
    owner.close()


def _batched_evalsha_argc(cluster):
    """(numkeys, ARGV count) of every EVALSHA over more than one key the
    nodes ran, from their slow logs (which keep 31 arguments and count the
    rest)."""
    out = []
    for log in cluster.each("SLOWLOG", "GET", "100000"):
        for entry in log:
            args = [a.decode() if isinstance(a, bytes) else a
                    for a in entry[3]]
            if args[0].upper() != "EVALSHA" or int(args[2]) < 2:
                continue
            total = len(args)
            m = re.match(r"\.\.\. \((\d+) more arguments\)", args[-1])
            if m:
                total = len(args) - 1 + int(m.group(1))
            out.append((int(args[2]), total - 3 - int(args[2])))
    return out


@pytest.mark.parametrize("op", ["release", "extend"])
def test_one_kind_turn_goes_as_its_own_script(cluster, daemon_factory, op):
    """A node's turn that holds only releases (or only extends) goes as the
    lighter script of that kind (tokens, then channels or ttls: 1 or 2
    arguments per key, not SCRIPT_BATCH's 4), and still answers per key:
    the right token acts, a wrong one is not_held, a key of another type
    fails alone."""
    d = daemon_factory.start(cluster, name="dk")
    owner = d.client()
    bad = rname("kbad")
    cluster.each("HSET", lock_key(bad), "f", "v")
    held = {}
    for j in range(24):
        res = rname("k%d" % j)
        r = owner.call("acquire", resource=res, ttl_ms=20000)
        assert_ok(r, "acquire")
        held[res] = r["lock"]
    fields = {"ttl_ms": 60000} if op == "extend" else {}
    plan = []
    for j, (res, tok) in enumerate(held.items()):
        right = j % 3 != 1
        plan.append((dict(op=op, resource=res, id="q%d" % j,
                          lock=tok if right else "0" * 32, **fields),
                     "ok" if right else "not_held"))
    plan.append((dict(op=op, resource=bad, id="qbad", lock="1" * 32,
                      **fields), "no_quorum"))
    cluster.each("CONFIG", "SET", "slowlog-log-slower-than", "0")
    cluster.each("CONFIG", "SET", "slowlog-max-len", "100000")
    cluster.each("SLOWLOG", "RESET")
    with d.client(timeout=15) as c:
        answers, _ = c.pipeline([req for req, _ in plan], timeout=15)
    cluster.each("CONFIG", "SET", "slowlog-log-slower-than", "10000")
    for req, want in plan:
        got = answers[Client.key(req["id"])]
        assert len(got) == 1 and _code(got[0]) == want, (req, want, got)
    for (req, want) in plan[:-1]:
        key = lock_key(req["resource"])
        tok = held[req["resource"]].encode()
        if want == "not_held":
            assert cluster.get_all(key) == [tok] * 5
            for p in cluster.pttl_all(key):
                assert p <= 20000, cluster.pttl_all(key)
        elif op == "release":
            assert cluster.get_all(key) == [None] * 5
        else:
            for p in cluster.pttl_all(key):
                assert 20000 < p <= 60000, cluster.pttl_all(key)
    assert cluster.each("TYPE", lock_key(bad)) == ["hash"] * 5
    batched = _batched_evalsha_argc(cluster)
    assert batched, "no batched script call was made"
    for n, argc in batched:
        # release: the tokens, and the channels on a node that announces
        allowed = (n, 2 * n) if op == "release" else (2 * n,)
        assert argc in allowed, (op, n, argc, batched)
    owner.close()
