"""The compose topology of docker/compose.yaml, run with podman-compose.

    /usr/bin/python3 -m pytest tests/container/test_compose.py -q

Five redis containers (AOF, as in the file), the sidecar, two replicas of
the example bot, and a second sidecar (daemon B of the end-to-end test),
with the test override tests/container/compose.test.yaml: the nodes and the
bots without a network, the sidecar on the host's loopback for its metrics
port, unix sockets in shared directories. podman-compose runs podman
through tests/container/podman-host-only.sh, which refuses to create a
network or run a container on one.

Checks: every container runs; the sidecar is healthy with five nodes; the
two bot replicas handle every update exactly once between them; the
end-to-end Telegram test (tests/e2e) passes against the two sidecars and
the five nodes; `podman-compose down` stops the sidecars with exit 0.
"""

import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

import engine
from test_image import http_tcp, ndjson

COMPOSE_FILE = engine.REPO / "docker" / "compose.yaml"
OVERRIDE = engine.HERE / "compose.test.yaml"
SHIM = engine.HERE / "podman-host-only.sh"
SERVICES = ["redis-1", "redis-2", "redis-3", "redis-4", "redis-5",
            "redlockd", "redlockd-b", "bot"]
UP_BOUND_S = 180
READY_BOUND_S = 60
BOT_UPDATES_MIN = 10
E2E_BOUND_S = 400


class Project:
    def __init__(self, root):
        self.name = "rltest%s" % uuid.uuid4().hex[:8]
        self.dir = root
        self.port = engine.free_port()
        for sub, owner, mode in (("nodes", (0, 0), 0o755),
                                 ("sock", (10001, 10001), 0o750),
                                 ("sock-b", (10001, 10001), 0o750)):
            d = root / sub
            d.mkdir()
            os.chown(d, *owner)
            os.chmod(d, mode)
        self.env = dict(os.environ, RLTEST_DIR=str(root),
                        RLTEST_METRICS_PORT=str(self.port))

    def compose(self, *args, bound=UP_BOUND_S, check=True):
        argv = ["podman-compose", "--podman-path", str(SHIM),
                "-p", self.name, "-f", str(COMPOSE_FILE), "-f",
                str(OVERRIDE)] + list(args)
        p = subprocess.run(argv, capture_output=True, text=True,
                           timeout=bound, env=self.env,
                           cwd=str(engine.REPO))
        if check and p.returncode != 0:
            raise AssertionError("podman-compose %s: exit %d\n%s\n%s" % (
                " ".join(args), p.returncode, p.stdout[-3000:],
                p.stderr[-3000:]))
        return p

    def containers(self):
        """{name: state} of this project's containers ("running", ...)."""
        names = engine.sh(["podman", "ps", "-a", "--filter",
                           "label=io.podman.compose.project=" + self.name,
                           "--format", "{{.Names}}"]).stdout.split()
        return {n: engine.inspect(n, "{{.State.Status}}") for n in names}

    def cleanup(self):
        self.compose("down", "-v", "-t", "5", bound=120, check=False)
        for c in self.containers():
            engine.remove(c)
        vols = engine.sh(["podman", "volume", "ls", "-q", "--filter",
                          "label=io.podman.compose.project=" + self.name],
                         check=False).stdout.split()
        for v in vols:
            engine.sh(["podman", "volume", "rm", "-f", v], check=False)


@pytest.fixture(scope="module")
def project(compose_images):
    if shutil.which("podman-compose") is None:
        pytest.skip("podman-compose is not installed "
                    "(apt-get install podman-compose)")
    root = Path(tempfile.mkdtemp(prefix="rlcc-", dir="/tmp"))
    os.chmod(root, 0o755)
    proj = Project(root)
    try:
        t0 = time.monotonic()
        proj.compose("up", "-d", "--no-build", *SERVICES)
        print("compose up in %.0fs" % (time.monotonic() - t0))
        yield proj
    finally:
        proj.cleanup()
        shutil.rmtree(root, ignore_errors=True)
    assert not any(n.startswith(proj.name) for n in engine.sh(
        ["podman", "network", "ls", "--format", "{{.Name}}"]).stdout.split())


def sidecar_sock(proj, which="sock"):
    return proj.dir / which / "redlockd.sock"


def test_topology_runs_without_any_network(project):
    def all_running():
        cs = project.containers()
        bad = {n: s for n, s in cs.items() if s != "running"}
        return len(cs) == 9 and not bad and cs
    cs = engine.wait_until(all_running, READY_BOUND_S,
                           "nine running containers")
    for name in cs:
        mode = engine.inspect(name, "{{.HostConfig.NetworkMode}}")
        want = "host" if "_redlockd_" in name else "none"
        assert mode == want, (name, mode)
    # The nodes are the compose file's: AOF, fsync always, noeviction.
    for k in range(1, 6):
        argv = engine.inspect("%s_redis-%d_1" % (project.name, k),
                              "{{json .Config.Cmd}}")
        for flag in ("--appendonly", "--appendfsync", "noeviction"):
            assert flag in argv, argv


def test_sidecar_is_healthy_and_serves_metrics(project):
    for which in ("sock", "sock-b"):
        h = engine.wait_until(
            lambda: ndjson(sidecar_sock(project, which), {"op": "health"}),
            READY_BOUND_S, "the %s sidecar" % which)
        engine.wait_until(
            lambda: ndjson(sidecar_sock(project, which),
                           {"op": "health"})["ok"],
            READY_BOUND_S, "a quorum for the %s sidecar" % which)
        h = ndjson(sidecar_sock(project, which), {"op": "health"})
        assert len(h["nodes"]) == 5 and all(n["up"] for n in h["nodes"]), h
    code, body = http_tcp(project.port, "/metrics")
    assert code == 200 and "redlockd_nodes_up 5" in body, body[:1500]


def bot_lines(project):
    out = []
    for name in project.containers():
        if "_bot_" in name:
            for ln in engine.logs(name).splitlines():
                try:
                    d = json.loads(ln)
                except ValueError:
                    continue
                if isinstance(d, dict) and "update" in d:
                    out.append(d)
    return out


def test_bot_replicas_handle_each_update_once(project):
    def enough():
        handled = {d["update"] for d in bot_lines(project)
                   if d.get("outcome") == "handled"}
        return len(handled) >= BOT_UPDATES_MIN
    engine.wait_until(enough, READY_BOUND_S + 30, "%d handled updates"
                      % BOT_UPDATES_MIN, step=0.5)
    # Stop the bots (SIGTERM): they end their run; the counts are final.
    for name in project.containers():
        if "_bot_" in name:
            engine.sh(["podman", "stop", "-t", "10", name], bound=60)
    lines = bot_lines(project)
    handled = collections.Counter(d["update"] for d in lines
                                  if d.get("outcome") == "handled")
    bots = {d["bot"] for d in lines}
    assert len(bots) == 2, bots
    twice = {u: c for u, c in handled.items() if c > 1}
    assert not twice, "updates handled more than once: %r" % twice
    outcomes = collections.Counter(d["outcome"] for d in lines)
    assert outcomes["busy"] + outcomes["done"] > 0, outcomes
    errors = [d for d in lines if d["outcome"].startswith("error")]
    assert not errors, errors[:5]
    # Every update some replica saw was handled by one of them.
    seen = {d["update"] for d in lines}
    assert seen - set(handled) <= {max(seen)}, sorted(seen - set(handled))


def test_e2e_telegram_against_the_compose_topology(project):
    if shutil.which("node") is None or not (
            engine.REPO / "clients" / "node" / "node_modules" /
            "grammy").is_dir():
        pytest.skip("the e2e test needs node and grammy "
                    "(cd clients/node && npm ci)")
    nodes = ",".join(str(project.dir / "nodes" / ("redis-%d.sock" % k))
                     for k in range(1, 6))
    env = dict(os.environ, E2E_REDIS_SOCKETS=nodes,
               E2E_REDLOCKD_SOCKETS="A=%s,B=%s" % (
                   sidecar_sock(project), sidecar_sock(project, "sock-b")))
    p = subprocess.run(
        [sys.executable, "-m", "pytest", str(engine.REPO / "tests" / "e2e"),
         "-q", "-p", "no:cacheprovider", "-s", "-rs"],
        capture_output=True, text=True, timeout=E2E_BOUND_S, env=env,
        cwd=str(engine.REPO))
    print(p.stdout[-4000:])
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
    assert "1 passed" in p.stdout, p.stdout[-2000:]


def test_down_stops_the_sidecars_cleanly(project):
    names = [n for n in project.containers() if "_redlockd" in n]
    assert len(names) == 2, names
    for n in names:
        t0 = time.monotonic()
        engine.sh(["podman", "stop", "-t", "10", n], bound=60)
        took = time.monotonic() - t0
        assert engine.inspect(n, "{{.State.ExitCode}}") == "0", \
            engine.logs(n)[-2000:]
        assert took < 10, "%s took %.1fs to stop: killed?" % (n, took)
        assert "level" in engine.logs(n)


def test_podman_wrapper_refuses_networks(engine_ready):
    p = subprocess.run([str(SHIM), "network", "create", "rltest-bridge"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "refusing" in p.stderr, p
    p = subprocess.run([str(SHIM), "run", "--rm", engine.BASE_IMAGE, "true"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "--network host" in p.stderr, p
    p = subprocess.run([str(SHIM), "run", "--rm", "--network", "bridge",
                        engine.BASE_IMAGE, "true"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1, p
    # What podman-compose adds for the file's networks is dropped.
    p = subprocess.run([str(SHIM), "run", "--rm", "--network", "none",
                        "--net", "x_nodes", "--network-alias", "n",
                        "-p", "127.0.0.1:1:1", engine.BASE_IMAGE, "true"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p
    assert "rltest-bridge" not in engine.sh(
        ["podman", "network", "ls", "--format", "{{.Name}}"]).stdout
