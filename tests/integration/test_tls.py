"""Rediss:// nodes. Five real redis-servers speak TLS only on
127.0.0.1 (plain TCP off; their unix sockets stay plain for the tests'
own inspection), with certificates the openssl CLI makes in a temp dir
(tlsutil.Certs). The daemon verifies by default: a certificate from an
unknown CA, for another name, or expired leaves the node down with that
reason in /v1/health and the log, never a plain-text fallback; mutual TLS
presents --tls-cert-file; an ACL user authenticates over TLS; a TLS node
killed and restarted mid-load comes back."""

import json
import os
import tempfile
import threading
import time
from pathlib import Path

from rl import (KEEP_TMP, SLOW, Cluster, Daemon, assert_error, assert_ok,
                err_code, lock_key, need_acl_channels, need_redis,
                poll_until, pytest, rname, run_bin)
from tlsutil import Certs, TlsNode


@pytest.fixture(scope="module")
def certs():
    d = Path(tempfile.mkdtemp(prefix="rltls-certs-"))
    try:
        yield Certs(d)
    finally:
        if not KEEP_TMP:
            for f in d.rglob("*"):
                if f.is_file():
                    f.unlink()
            for f in sorted(d.rglob("*"), reverse=True):
                f.rmdir()
            d.rmdir()


class _Env:
    """Starts TLS clusters and daemons; stops them all at teardown,
    asserting each daemon exits 0 on SIGTERM."""

    def __init__(self, certs):
        self.certs = certs
        self.clusters = []
        self.daemons = []

    def cluster(self, n=5, cert="server", auth_clients="no"):
        c = Cluster(n)
        c.nodes = [TlsNode(c.dir, k + 1, self.certs, cert=cert,
                           auth_clients=auth_clients) for k in range(n)]
        self.clusters.append(c)
        return c.start()

    def daemon(self, cluster, extra=(), uris=None, wait_nodes=True,
               ca=True, name="d"):
        if uris is None:
            # Names and addresses both: SNI and DNS-name checks on the
            # even nodes, IP-address checks on the odd ones.
            uris = [nd.tls_uri("localhost" if i % 2 else "127.0.0.1")
                    for i, nd in enumerate(cluster.nodes)]
        args = []
        for u in uris:
            args += ["--node", u]
        flags = (["--tls-ca-file", self.certs.crt("ca")] if ca else [])
        d = Daemon(cluster, name=name, node_args=args,
                   extra=flags + list(extra))
        self.daemons.append(d)
        return d.start(wait_nodes=wait_nodes)

    @staticmethod
    def stop(d):
        code, _ = d.stop(5.0)
        assert code == 0, "daemon %s: exit %r\n%s" % (d.name, code,
                                                      d.stderr_tail(60))

    def teardown(self):
        errors = []
        for d in reversed(self.daemons):
            if d.proc is None or d.exit_code is not None:
                continue  # stopped by the test (stop() checks the code)
            alive = d.proc.poll() is None
            code, _ = d.stop(5.0)
            if not alive or code != 0:
                errors.append("daemon %s: exit %r (alive at teardown: %s)"
                              "\n%s" % (d.name, code, alive,
                                        d.stderr_tail(60)))
        for c in self.clusters:
            c.stop()
        return errors


@pytest.fixture
def env(certs):
    e = _Env(certs)
    try:
        yield e
    finally:
        errors = e.teardown()
    assert not errors, "\n".join(errors)


def _down_with(d, want, timeout=10.0):
    """Polls /v1/health until every node is down with want in its
    last_error; returns the health."""
    def check():
        h = d.health()
        nodes = h.get("nodes") or []
        ok = nodes and all(not n["up"] and want in (n.get("last_error") or "")
                           for n in nodes)
        return h if ok else None
    h, _ = poll_until(check, timeout * SLOW, 0.05)
    last = d.health()
    print("health: %s" % json.dumps(last))
    assert h, "expected every node down with %r: %s\n%s" % (
        want, json.dumps(last), d.stderr_tail(30))
    return h


def test_tls_five_nodes_every_op(env):
    c = env.cluster()
    d = env.daemon(c)
    h = d.health()
    print("health: %s" % json.dumps(h))
    assert h["ok"] is True
    assert [n["tls"] for n in h["nodes"]] == ["verified"] * 5, h
    res = rname("tls")
    with d.client() as a, d.client(timeout=15.0) as b:
        r = a.call("acquire", resource=res, ttl_ms=20000, fence=True)
        assert_ok(r, "acquire over TLS")
        f1 = r["fence"]
        tok = r["lock"].encode()
        on, _ = poll_until(lambda: c.get_all(lock_key(res)) == [tok] * 5,
                           2.0 * SLOW)
        assert on, c.get_all(lock_key(res))
        assert_ok(a.call("extend", lock=r["lock"], ttl_ms=30000))
        pttl = c.pttl_all(lock_key(res))
        assert all(20000 < p <= 30000 for p in pttl), pttl
        b.send({"op": "acquire", "id": "w", "resource": res,
                "wait_ms": 10000, "ttl_ms": 20000, "fence": True})
        time.sleep(0.2)
        assert_ok(a.call("release", lock=r["lock"]))
        w = b.response("w", timeout=10.0 * SLOW)
        assert_ok(w, "the waiter after the release")
        assert w["fence"] > f1, (f1, w)
        assert_ok(b.call("release", lock=w["lock"]))
        # renew keeps a short lock alive well past its TTL.
        r = a.call("acquire", resource=res, ttl_ms=300, renew=True)
        assert_ok(r, "renewed acquire")
        time.sleep(1.0)
        tok = r["lock"].encode()
        assert c.get_all(lock_key(res)).count(tok) >= 3
        assert_ok(a.call("release", lock=r["lock"]))
    gone, _ = poll_until(lambda: c.get_all(lock_key(res)) == [None] * 5,
                         2.0 * SLOW)
    assert gone, c.get_all(lock_key(res))
    # Nothing reached the nodes in plain text: TCP is off on them.
    for nd in c.nodes:
        assert nd.cmd("CONFIG", "GET", "port") == [b"port", b"0"]
        clients = nd.cmd("CLIENT", "LIST").decode()
        tcp = [ln for ln in clients.splitlines() if "addr=127.0.0.1" in ln]
        assert tcp, "node %d: no TLS client of the daemon: %s" % (nd.k,
                                                                  clients)


def test_tls_mutual_required(env):
    c = env.cluster(auth_clients="yes")
    # Without a client certificate the server refuses every handshake.
    d = env.daemon(c, wait_nodes=False, name="nocert")
    _down_with(d, "certificate required")
    with d.client() as cl:
        assert_error(cl.call("acquire", resource=rname("mtls")), "no_quorum")
    assert "certificate required" in d.stderr_text()
    env.stop(d)
    key = env.certs.key("client")
    d2 = env.daemon(c, name="mtls", extra=[
        "--tls-cert-file", env.certs.crt("client"), "--tls-key-file", key])
    with d2.client() as cl:
        r = cl.call("acquire", resource=rname("mtls"), ttl_ms=5000)
        assert_ok(r, "acquire with a client certificate")
        assert_ok(cl.call("release", lock=r["lock"]))
    key_text = Path(key).read_text()
    body = key_text.split("-----")[2].strip().splitlines()[0]
    assert body not in d2.stderr_text()


@pytest.mark.parametrize("cert,host,want", [
    ("roguesrv", "127.0.0.1", "CA not trusted"),
    ("wrongname", "localhost", "hostname mismatch"),
    ("wrongname", "127.0.0.1", "IP address mismatch"),
    ("expired", "localhost", "certificate has expired"),
])
def test_tls_bad_certificate_refused(env, cert, host, want):
    c = env.cluster(n=3, cert=cert)
    d = env.daemon(c, wait_nodes=False,
                   uris=[nd.tls_uri(host) for nd in c.nodes])
    h = _down_with(d, want)
    for n in h["nodes"]:
        assert n["last_error"].startswith(
            "TLS handshake: certificate verify failed: "), n
        assert n["tls"] == "verified", n
    assert want in d.stderr_text()
    # Still down a while later: retried with back-off, never plain text.
    time.sleep(0.5)
    assert not any(n["up"] for n in d.health()["nodes"])
    for nd in c.nodes:  # no handshake command ever ran (nor in plain)
        stats = nd.cmd("INFO", "commandstats")
        assert b"cmdstat_script" not in stats, stats
        assert b"cmdstat_info" not in stats, stats


def test_tls_server_name_override(env):
    """--tls-server-name: the certificate is for other.invalid only."""
    c = env.cluster(n=3, cert="wrongname")
    d = env.daemon(c, extra=["--tls-server-name", "other.invalid"],
                   uris=[nd.tls_uri("127.0.0.1") for nd in c.nodes])
    with d.client() as cl:
        assert_ok(cl.call("acquire", resource=rname("sni"), ttl_ms=3000))


def test_tls_plain_node_and_system_store(env):
    """A rediss:// URI on a plain port fails the handshake (no fallback);
    without --tls-ca-file the system store does not know the test CA."""
    c = env.cluster(n=3)
    plain = [nd.tls_uri() for nd in c.nodes]
    d = env.daemon(c, wait_nodes=False, ca=False, uris=plain, name="sys")
    _down_with(d, "CA not trusted")
    env.stop(d)
    need_redis(c.nodes, (7, 0), "CONFIG SET port (the plain listener)")
    for nd in c.nodes:  # a plain listener on another port
        assert nd.cmd("CONFIG", "SET", "port", "0") == "OK"
    from rl import RespError, free_tcp_port
    for attempt in range(5):  # another port if this one is taken meanwhile
        port = free_tcp_port()
        try:
            c.nodes[0].cmd("CONFIG", "SET", "port", str(port))
            break
        except RespError:
            if attempt == 4:
                raise
    d2 = env.daemon(c, wait_nodes=False, name="plain",
                    uris=["rediss://127.0.0.1:%d" % port])
    # redis-server waits for a line end that a ClientHello never has.
    _down_with(d2, "TLS handshake: timed out (is this a TLS port?)")
    # No handshake command reached the node in plain text (nor over TLS).
    stats = c.nodes[0].cmd("INFO", "commandstats")
    assert b"cmdstat_script" not in stats, stats


def test_tls_insecure_skip_verify(env):
    c = env.cluster(n=3, cert="expired")
    d = env.daemon(c, extra=["--tls-insecure-skip-verify"], ca=False)
    h = d.health()
    assert h["ok"] is True, h
    assert [n["tls"] for n in h["nodes"]] == ["insecure"] * 3, h
    assert "--tls-insecure-skip-verify" in d.stderr_text()
    with d.client() as cl:
        assert_ok(cl.call("acquire", resource=rname("insec"), ttl_ms=3000))


def test_tls_node_restart_mid_load(env):
    c = env.cluster()
    d = env.daemon(c)
    stop = threading.Event()
    counts = {"ok": 0, "fail": 0}
    errors = []

    def load():
        with d.client(timeout=10.0) as cl:
            for i in range(100000):
                if stop.is_set():
                    return
                r = cl.call("acquire", resource=rname("load"), ttl_ms=5000)
                if r.get("ok"):
                    counts["ok"] += 1
                    rr = cl.call("release", lock=r["lock"])
                    if not rr.get("ok"):
                        errors.append(rr)
                else:
                    counts["fail"] += 1
                    if err_code(r) != "no_quorum":
                        errors.append(r)

    t = threading.Thread(target=load)
    t.start()
    try:
        time.sleep(0.5)
        before = counts["ok"]
        c.nodes[2].kill9()
        time.sleep(0.5)
        c.nodes[2].start()
        back, _ = poll_until(lambda: d.health()["nodes"][2]["up"],
                             15.0 * SLOW, 0.05)
        assert back, d.health()
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(30)
    print("ok %d (before the kill %d), fail %d" % (counts["ok"], before,
                                                   counts["fail"]))
    assert not t.is_alive()
    assert errors == [], errors[:3]
    assert counts["ok"] > before > 0, counts
    assert counts["fail"] == 0, counts  # 4 of 5 nodes kept the quorum
    assert d.alive()
    with d.client() as cl:
        r = cl.call("acquire", resource=rname("after"), ttl_ms=5000)
        assert_ok(r)


def test_tls_acl_user(env):
    c = env.cluster()
    need_acl_channels(c.nodes)
    pw = "tlspw-%s" % os.urandom(8).hex()
    admin = "admin-%s" % os.urandom(8).hex()
    for nd in c.nodes:
        assert nd.cmd("ACL", "SETUSER", "redlockd", "on", ">" + pw,
                      "~redlock:*", "&redlock:*", "+@all") == "OK"
        # The default user gets a password of the test's (inspection).
        assert nd.cmd("ACL", "SETUSER", "default", "resetpass",
                      ">" + admin) == "OK"
        nd.password = admin
        assert nd.cmd("ACL", "LOG", "RESET") == "OK"
    uris = [nd.tls_uri("localhost", userinfo="redlockd:" + pw)
            for nd in c.nodes]
    bad = env.daemon(c, wait_nodes=False, name="badpw",
                     uris=[nd.tls_uri(userinfo="redlockd:nope")
                           for nd in c.nodes])
    _down_with(bad, "WRONGPASS")
    env.stop(bad)
    for nd in c.nodes:
        assert nd.cmd("ACL", "LOG", "RESET") == "OK"
    d = env.daemon(c, uris=uris)
    with d.client() as cl:
        r = cl.call("acquire", resource=rname("tlsacl"), ttl_ms=5000,
                    fence=True)
        assert_ok(r, "acquire as the ACL user over TLS")
        assert_ok(cl.call("release", lock=r["lock"]))
    for nd in c.nodes:
        assert nd.cmd("ACL", "LOG") == [], nd.k
        users = [ln for ln in nd.cmd("CLIENT", "LIST").decode().splitlines()
                 if "addr=127.0.0.1" in ln]
        assert users and all("user=redlockd" in ln for ln in users), users
    assert pw not in d.stderr_text()
    assert pw not in json.dumps(d.health())


def test_tls_config_refusals(certs, tmp_path):
    node = ["--node", "rediss://127.0.0.1:1"]
    loose = tmp_path / "loose.key"
    loose.write_bytes(Path(certs.key("client")).read_bytes())
    os.chmod(loose, 0o644)
    p = run_bin(node + ["--tls-cert-file", certs.crt("client"),
                        "--tls-key-file", str(loose)])
    err = p.stderr.decode()
    print(err)
    assert p.returncode == 2, err
    assert "readable by group or others" in err and "0644" in err
    body = loose.read_text().split("-----")[2].strip().splitlines()[0]
    assert body not in err
    # Group-readable: only when root owns it (a Kubernetes secret with
    # fsGroup), never when its owner is another user.
    os.chmod(loose, 0o640)
    os.chown(loose, 65534, 65534)
    p = run_bin(node + ["--tls-cert-file", certs.crt("client"),
                        "--tls-key-file", str(loose)])
    assert p.returncode == 2 and "0640" in p.stderr.decode(), p.stderr
    # Root's 0640 passes the check: the start goes on to load the key,
    # and fails only because it does not match the (server's) certificate.
    os.chown(loose, 0, 0)
    p = run_bin(node + ["--tls-cert-file", certs.crt("server"),
                        "--tls-key-file", str(loose), "--socket",
                        str(tmp_path / "k.sock")])
    err = p.stderr.decode()
    assert p.returncode != 0 and "key values mismatch" in err, err
    assert "readable" not in err and body not in err, err
    p = run_bin(node + ["--tls-cert-file", certs.crt("client")])
    assert p.returncode == 2
    assert "go together" in p.stderr.decode()
    # A bad CA file is refused at start, naming the file.
    bogus = tmp_path / "bogus.pem"
    bogus.write_text("not a certificate\n")
    p = run_bin(node + ["--tls-ca-file", str(bogus), "--socket",
                        str(tmp_path / "s.sock")])
    err = p.stderr.decode()
    print(err)
    assert p.returncode != 0, err
    assert str(bogus) in err and "--tls-ca-file" in err


def test_tls_wake_across_daemons(env):
    """Pub/sub wake-ups ride node.c's TLS connections too: a waiter on
    daemon B subscribes on every node over TLS and wakes at daemon A's
    release, long before A's TTL."""
    c = env.cluster()
    a = env.daemon(c, name="a")
    b = env.daemon(c, name="b")
    res = rname("tlswait")
    chan = "redlock:wake:" + res
    with a.client() as ca, b.client(timeout=20.0) as cb:
        r = ca.call("acquire", resource=res, ttl_ms=60000)
        assert_ok(r)
        cb.send({"op": "acquire", "id": "w", "resource": res,
                 "wait_ms": 15000, "ttl_ms": 5000})
        subs, _ = poll_until(lambda: all(
            nd.cmd("PUBSUB", "NUMSUB", chan)[1] == 1 for nd in c.nodes),
            5.0 * SLOW)
        assert subs, [nd.cmd("PUBSUB", "NUMSUB", chan) for nd in c.nodes]
        for nd in c.nodes:  # the subscriber is a TLS client, TCP is off
            ln = [x for x in nd.cmd("CLIENT", "LIST").decode().splitlines()
                  if "sub=1" in x]
            assert len(ln) == 1 and "addr=127.0.0.1" in ln[0], ln
        t0 = time.monotonic()
        assert_ok(ca.call("release", lock=r["lock"]))
        w = cb.response("w", timeout=20.0)
        took = time.monotonic() - t0
        print("waiter on the other daemon got it %.0f ms after the "
              "release" % (took * 1000))
        assert_ok(w, "the waiter on the other daemon")
        assert took < 1.0 * SLOW, took  # woken, not its 500 ms polling
        assert_ok(cb.call("release", lock=w["lock"]))
    # No waiter left: the subscribers close.
    gone, _ = poll_until(lambda: all(
        nd.cmd("PUBSUB", "NUMSUB", chan)[1] == 0 for nd in c.nodes),
        5.0 * SLOW)
    assert gone


def test_compose_tls_variant(env, tmp_path):
    """docker/compose.tls.yaml and docker/tls/make-certs.sh, run here: the
    script's certificates, the override's redis-server TLS arguments and
    the sidecar's TLS environment give five verified, mutual-TLS nodes
    (names as in compose: the certificate's redis-1 .. redis-5)."""
    import subprocess
    import yaml
    from rl import REPO
    certs = tmp_path / "certs"
    r = subprocess.run([str(REPO / "docker" / "tls" / "make-certs.sh"),
                        str(certs)], capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    for key in ("server.key", "client.key"):
        mode = os.stat(certs / key).st_mode & 0o777
        assert mode == 0o600, (key, oct(mode))
    over = yaml.safe_load((REPO / "docker" / "compose.tls.yaml").read_text())
    cmd = over["services"]["redis-1"]["command"]
    assert cmd[0] == "redis-server" and "--tls-auth-clients" in cmd
    c = Cluster(5)
    env.clusters.append(c)
    nodes = []
    compose_args = [a.replace("/tls/", str(certs) + "/") for a in cmd[1:]]

    def server_args(nd):
        # The compose file's arguments instead of TlsNode's, built at each
        # start with the node's port of the moment: a first start that
        # finds its free port taken meanwhile retries on another one.
        args = list(compose_args)
        args[args.index("--tls-port") + 1] = str(nd.tls_port)
        return args + ["--bind", "127.0.0.1"]

    for k in range(5):
        nd = TlsNode(c.dir, k + 1, env.certs)
        nd.server_args = (lambda nd=nd: server_args(nd))
        nodes.append(nd)
    c.nodes = nodes
    c.start()
    sidecar = over["services"]["redlockd"]["environment"]
    uris = [u.strip() for u in sidecar["REDLOCKD_NODES"].split(",")]
    assert all(u.startswith("rediss://redis-%d:6379" % (i + 1))
               for i, u in enumerate(uris)), uris
    mount = "/run/secrets/redlockd-tls/"
    flags = []
    for var, flag in (("REDLOCKD_TLS_CA_FILE", "--tls-ca-file"),
                      ("REDLOCKD_TLS_CERT_FILE", "--tls-cert-file"),
                      ("REDLOCKD_TLS_KEY_FILE", "--tls-key-file")):
        assert sidecar[var].startswith(mount), sidecar[var]
        flags += [flag, str(certs / sidecar[var][len(mount):])]
    d = env.daemon(c, ca=False, uris=[nd.tls_uri() for nd in c.nodes],
                   extra=flags + ["--tls-server-name", "redis-3"])
    with d.client() as cl:
        r = cl.call("acquire", resource=rname("compose"), ttl_ms=3000)
        assert_ok(r, "acquire with the compose TLS variant")


def test_tls_refusal_warned_once_per_outage(env):
    """A node whose certificate we do not trust fails every reconnect alike:
    one warning per node, and the repeats at debug (each attempt warned
    before, a line per node every back-off for as long as it lasted)."""
    c = env.cluster(n=3)
    d = env.daemon(c, wait_nodes=False, ca=False, name="once",
                   extra=["--log-level", "debug"])
    _down_with(d, "CA not trusted")

    def lines(level):
        return [ln for ln in d.stderr_text().splitlines()
                if " %s " % level in ln and "CA not trusted" in ln]

    repeated, _ = poll_until(lambda: len(lines("DEBUG")) >= 3, 10.0 * SLOW,
                             0.1)
    assert repeated, d.stderr_tail(40)
    warns = lines("WARN ")
    assert len(warns) == 3, "\n".join(warns)
    for nd in c.nodes:
        assert sum(":%d: " % nd.tls_port in ln for ln in warns) == 1, warns
