"""The redlockd image, built from docker/Dockerfile and run with podman.

    /usr/bin/python3 -m pytest tests/container/test_image.py -q

The image is built on the local debootstrapped base (host-setup.sh, no
registry) and run as a user would run it: as its non-root user, the socket
in a mounted volume, the metrics port on the host's loopback
(--network=host, a free port), five real redis-servers of the host on unix
sockets in a second mounted directory. Skipped, with the reason, only where
no container can run (no podman or runc, not root, or podman refused a
trivial container).
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import engine
from engine import rl

READY_BOUND_S = 30.0
STOP_BOUND_S = 15.0
VERSION = "0.1.0"


class HostNodes(rl.Cluster):
    """Five redis-servers of the host on unix sockets in DIR/nodes, which
    the image's user may reach (socket mode 777)."""

    def __init__(self, root):
        d = Path(root) / "nodes"
        d.mkdir()
        os.chmod(d, 0o755)
        super().__init__(5, d, socket_perm="777")

    def container_uris(self, inside="/run/nodes"):
        """REDLOCKD_NODES for a container with DIR/nodes at inside."""
        return ",".join("unix://%s/%s" % (inside, nd.path.name)
                        for nd in self.nodes)

    def get_all(self, key):
        """GET key on every node, as text."""
        return [v.decode() if isinstance(v, bytes) else v
                for v in super().get_all(key)]


@pytest.fixture
def workdir():
    # Short: unix socket paths are limited to 107 bytes.
    d = Path(tempfile.mkdtemp(prefix="rlc-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def nodes(workdir):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    n = HostNodes(workdir).start()
    yield n
    n.stop()


def socket_volume(workdir):
    """The socket volume, owned by the image's user like in the image."""
    d = workdir / "sock"
    d.mkdir()
    os.chown(d, 10001, 10001)
    os.chmod(d, 0o750)
    return d


def start_sidecar(image, nodes, workdir, extra_env=(), network="host"):
    sock_dir = socket_volume(workdir)
    port = engine.free_port() if network == "host" else None
    env = ["-e", "REDLOCKD_NODES=" + nodes.container_uris(),
           "-e", "REDLOCKD_LOG_FORMAT=json"]
    env += ["-e", "REDLOCKD_METRICS_LISTEN=" +
            ("127.0.0.1:%d" % port if port else "off")]
    for e in extra_env:
        env += ["-e", e]
    cname = engine.run(image, network=network, name_prefix="sidecar", opts=[
        "-v", "%s:/run/redlockd" % sock_dir,
        "-v", "%s:/run/nodes" % nodes.dir,
        "--read-only", "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges"] + env)
    sock = sock_dir / "redlockd.sock"

    def healthy():
        if engine.inspect(cname, "{{.State.Running}}") != "true":
            raise AssertionError("the container exited:\n" +
                                 engine.logs(cname))
        return ndjson(sock, {"op": "health"}).get("ok") is True
    engine.wait_until(healthy, READY_BOUND_S, "the sidecar's quorum")
    return cname, sock, port


def ndjson(sock, req, timeout=3.0):
    """One request on a fresh NDJSON connection: the first line back."""
    with rl.Client(sock, timeout) as c:
        c.send(req)
        return json.loads(c.read_line())


def http_unix(sock, method, path, body=b""):
    """One HTTP/1.1 request on the socket: (status, body text)."""
    r = rl.http(sock, method, path, body, timeout=3.0)
    return r.status, r.body.decode()


def http_tcp(port, path):
    r = rl.http(("127.0.0.1", port), "GET", path, timeout=3.0)
    return r.status, r.body.decode()


def test_runs_as_its_non_root_user_and_answers_on_the_socket(
        image, nodes, workdir):
    cname, sock, port = start_sidecar(image, nodes, workdir)
    # PID 1 is the daemon itself (the entrypoint execs it), uid 10001.
    status = engine.sh(["podman", "exec", cname, "cat",
                        "/proc/1/status"]).stdout
    uids = [ln.split()[1:] for ln in status.splitlines()
            if ln.startswith("Uid:")][0]
    assert set(uids) == {"10001"}, status
    cmdline = engine.sh(["podman", "exec", cname, "cat",
                         "/proc/1/cmdline"]).stdout.split("\0")
    assert cmdline[0] == "/usr/local/bin/redlockd", cmdline
    assert engine.inspect(cname, "{{.Config.User}}") == "10001:10001"
    # The socket in the mounted volume: 0660, owned by the image's user.
    st = os.stat(sock)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (10001, 10001,
                                                          0o660)
    assert ndjson(sock, {"op": "ping", "id": 7}) == {"id": 7, "ok": True}
    code, body = http_unix(sock, "GET", "/v1/health")
    h = json.loads(body)
    assert code == 200 and h["ok"] is True and h["quorum"] == 3, body
    assert len(h["nodes"]) == 5 and all(n["up"] for n in h["nodes"]), body
    # The image's HEALTHCHECK (kept: built in docker format) passes.
    hc = engine.sh(["podman", "healthcheck", "run", cname], check=False)
    assert hc.returncode == 0, hc.stdout + hc.stderr
    # A lock through the container lands on the host's nodes (HTTP: the
    # lock outlives the connection).
    code, body = http_unix(sock, "POST", "/v1/locks",
                           b'{"resource":"container:1","ttl_ms":10000}')
    r = json.loads(body)
    assert code == 200 and r["ok"] is True, body
    assert nodes.get_all("redlock:lock:container:1").count(r["lock"]) >= 3
    code, _ = http_unix(sock, "DELETE", "/v1/locks/%s" % r["lock"])
    assert code == 200
    # JSON log lines on stdout/stderr, as configured.
    first = [ln for ln in engine.logs(cname).splitlines() if ln.strip()][0]
    assert json.loads(first).get("level"), first


def test_serves_metrics_on_its_port(image, nodes, workdir):
    cname, sock, port = start_sidecar(image, nodes, workdir)
    code, body = http_tcp(port, "/metrics")
    assert code == 200, body
    assert "redlockd_nodes_up 5" in body, body[:2000]
    assert 'redlockd_build_info{version="%s"' % VERSION in body, \
        [ln for ln in body.splitlines() if "build_info" in ln]
    code, body = http_tcp(port, "/v1/health")
    assert code == 200 and json.loads(body)["ok"] is True
    # Only /metrics and /v1/health on the TCP port: no lock routes.
    code, _ = http_tcp(port, "/v1/ping")
    assert code == 404


@pytest.mark.parametrize("args,env,message", [
    (["--bogus-flag"], [], "--bogus-flag"),
    (["--node-timeout-ms", "0"], [], "node-timeout-ms"),
    ([], [], "REDLOCKD_NODES is not set"),
    (["--node", "redis://h:notaport"], [], "bad port"),
    ([], ["REDLOCKD_DEV=maybe"], "REDLOCKD_DEV"),
])
def test_refuses_bad_flags_with_exit_2(image, args, env, message):
    opts = []
    for e in env:
        opts += ["-e", e]
    if args and args[0] != "--node":
        opts += ["-e", "REDLOCKD_NODES=redis://127.0.0.1:1"]
    p = engine.run(image, args=args, network="none", detach=False,
                   opts=opts + ["--no-healthcheck"])
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert message in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) <= 3, p.stderr


def test_version_and_other_commands(image):
    p = engine.run(image, args=["--version"], detach=False)
    assert p.returncode == 0 and VERSION in p.stdout + p.stderr, p
    p = engine.run(image, args=["redlockctl", "--help"], detach=False)
    assert p.returncode == 0, p


def read_event(f, bound):
    """The next JSON line, or None at EOF."""
    line = f.readline()
    return json.loads(line) if line else None


def test_sigterm_stops_cleanly_and_releases_session_locks(
        image, nodes, workdir):
    cname, sock, port = start_sidecar(image, nodes, workdir)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(STOP_BOUND_S)
    s.connect(str(sock))
    f = s.makefile("rb")
    s.sendall(b'{"op":"acquire","id":1,"resource":"container:stop",'
              b'"ttl_ms":60000,"renew":true}\n')
    r = json.loads(f.readline())
    assert r["ok"] is True, r
    key = "redlock:lock:container:stop"
    assert nodes.get_all(key).count(r["lock"]) >= 3
    t0 = time.monotonic()
    stop = subprocess.Popen(["podman", "stop", "-t", str(int(STOP_BOUND_S)),
                             cname], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    # The session ends: a "lost" event for the lock, or the close itself.
    seen = []
    try:
        while True:
            ev = read_event(f, STOP_BOUND_S)
            if ev is None:
                break
            seen.append(ev)
    except (OSError, ValueError):
        pass
    for ev in seen:
        assert ev.get("event") == "lost" and ev["lock"] == r["lock"], seen
    stop.communicate(timeout=STOP_BOUND_S + 30)
    took = time.monotonic() - t0
    s.close()
    # Exit 0 of its own accord (not the SIGKILL after -t), and the lock is
    # gone from every node, 60 s before its TTL.
    assert engine.inspect(cname, "{{.State.ExitCode}}") == "0", \
        engine.logs(cname)
    assert took < STOP_BOUND_S, "stop took %.1fs: killed?" % took
    assert r["lock"] not in nodes.get_all(key), nodes.get_all(key)
    assert not os.path.exists(sock), "socket left behind"
