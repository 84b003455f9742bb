"""Fixtures: a real redlockd (``--dev``) and, for node-failure tests, a
daemon on five redis-servers of our own, both started by the repository's
shared test harness (tests/harness/rl.py).

Everything runs on unix sockets in fresh temp dirs under /tmp.  Daemons are
stopped with SIGTERM in teardown (SIGKILL after a bound), redis-servers are
resumed (SIGCONT) and killed, and the dirs removed, also when a test fails.

Environment: REDLOCKD_BIN (daemon binary; default <repo>/build/sidecar/
redlockd), REDIS_SERVER (default redis-server).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import List, Optional

import pytest

HERE = Path(__file__).resolve().parent
PKG_ROOT = HERE.parent                      # clients/python
REPO = HERE.parents[2]
sys.path.insert(0, str(PKG_ROOT))
sys.path.insert(0, str(REPO / "tests" / "harness"))

import rl  # noqa: E402  (the harness every Python suite shares)

VECTORS = REPO / "proto" / "vectors" / "requests.json"

STOP_BOUND_S = 10.0


def rname(tag: str = "r") -> str:
    """A resource name no other test uses."""
    return "pytest:%s:%s" % (tag, uuid.uuid4().hex[:12])


class Daemon(rl.Daemon):
    """One redlockd child (the shared harness's rl.Daemon): --dev, or
    --node URIs of our own redis-servers; DIR/<name>.sock, its output
    appended to DIR/<name>.stderr."""

    stderr_mode = "ab"

    def __init__(self, dir_: str, name: str = "d",
                 nodes: Optional[List[str]] = None, extra: tuple = ()) -> None:
        if not os.access(str(rl.BIN), os.X_OK):
            pytest.skip("redlockd binary not found at %s (build it, or set "
                        "REDLOCKD_BIN)" % rl.BIN)
        self.dev = nodes is None
        node_args = ["--dev"] if self.dev else [
            a for uri in nodes for a in ("--node", uri)]
        super().__init__(_Dir(dir_), name=name, extra=extra,
                         node_args=node_args, flags=["--log-level", "debug"])
        self.dir = dir_

    @property
    def path(self) -> str:
        return str(self.socket)

    def start(self, timeout: float = 15.0) -> "Daemon":
        """Until it answers a ping and, with --dev, every node is up: the
        daemon serves from its first moment, and a request that beats its
        own nodes' connections is answered no_quorum. Nodes the test gave
        may be down on purpose."""
        return super().start(wait_nodes=self.dev, timeout=timeout)

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float) -> Optional[int]:
        if self.proc is None:
            return None
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.exit_code

    def stop(self) -> Optional[int]:
        """SIGTERM; SIGKILL if it has not exited within STOP_BOUND_S (then
        None)."""
        return super().stop(STOP_BOUND_S)[0]

    def tail(self, n: int = 40) -> str:
        return self.stderr_tail(n)


class _Dir:
    def __init__(self, dir_: str) -> None:
        self.dir = dir_


class Cluster:
    """Five redis-servers (rl.RedisNode) on DIR/<tag>K.sock."""

    def __init__(self, dir_: str, n: int = 5, tag: str = "n") -> None:
        self.dir = dir_
        self.nodes = [rl.RedisNode(dir_, k, name="%s%d" % (tag, k))
                      for k in range(n)]

    @property
    def uris(self) -> List[str]:
        return [nd.uri for nd in self.nodes]

    def start(self, timeout: float = 10.0) -> "Cluster":
        if shutil.which(rl.REDIS_SERVER) is None:
            pytest.skip("redis-server not found")
        try:
            for nd in self.nodes:
                nd.start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def pause(self, *ks: int) -> None:
        for k in ks:
            self.nodes[k].pause()

    def kill(self, *ks: int) -> None:
        for k in ks:
            self.nodes[k].kill9()

    def resume_all(self) -> None:
        for nd in self.nodes:
            nd.resume()

    def stop(self) -> None:
        self.resume_all()
        for nd in self.nodes:
            nd.stop()


def _tmpdir(tag: str) -> str:
    # Short paths: a unix socket path must fit in 108 bytes.
    return tempfile.mkdtemp(prefix="rlpy-%s-" % tag, dir="/tmp")


@pytest.fixture(scope="session")
def daemon():
    """A --dev daemon shared by the whole session (use rname())."""
    d = _tmpdir("s")
    dm = Daemon(d, "d")
    try:
        dm.start()
        yield dm
    finally:
        code = dm.stop()
        shutil.rmtree(d, ignore_errors=True)
    assert code == 0, "redlockd exit %r after SIGTERM" % (code,)


@pytest.fixture
def sock(daemon) -> str:
    """The shared daemon's socket.  On a shared machine, something outside
    this suite may signal our daemon (a broad pkill); when it stopped on a
    signal, it is started again, with a warning.  Any other exit fails."""
    if daemon.proc is not None and daemon.proc.poll() is not None:
        tail = daemon.tail()
        if daemon.proc.returncode == 0 and ("SIGTERM: stopping" in tail or
                                            "SIGINT: stopping" in tail):
            import warnings
            warnings.warn("the shared redlockd was stopped by a signal from "
                          "outside the tests; restarting it:\n" + tail)
            daemon.start()
        else:
            pytest.fail("the shared redlockd exited with %s:\n%s"
                        % (daemon.proc.returncode, tail))
    return daemon.path


@pytest.fixture
def client(sock):
    from redlockd import RedlockClient
    c = RedlockClient(sock, timeout=10.0)
    try:
        yield c
    finally:
        c.close()


class Spawner:
    """Start daemons (and node clusters) owned by one test."""

    def __init__(self) -> None:
        self.dir = _tmpdir("f")
        self.daemons: List[Daemon] = []
        self.clusters: List[Cluster] = []
        self.n = 0

    def cluster(self) -> Cluster:
        c = Cluster(self.dir, tag="c%dn" % len(self.clusters))
        self.clusters.append(c)
        return c.start()

    def daemon(self, nodes: Optional[List[str]] = None, extra: tuple = (),
               name: Optional[str] = None) -> Daemon:
        self.n += 1
        d = Daemon(self.dir, name or "d%d" % self.n, nodes, extra)
        self.daemons.append(d)
        return d.start()

    def close(self) -> List[str]:
        errors = []
        for c in self.clusters:
            c.resume_all()
        for d in reversed(self.daemons):
            if d.proc is not None and d.proc.poll() is None:
                code = d.stop()
                if code != 0:
                    errors.append("daemon %s: exit %r after SIGTERM\n%s"
                                  % (d.name, code, d.tail()))
        for c in self.clusters:
            c.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        return errors


@pytest.fixture
def spawn():
    s = Spawner()
    try:
        yield s
    finally:
        errors = s.close()
    assert not errors, "\n".join(errors)


@pytest.fixture
def nodes(spawn):
    """(cluster, daemon): five redis-servers of this test's own and a
    daemon on them, for tests that pause nodes."""
    cluster = spawn.cluster()
    return cluster, spawn.daemon(nodes=cluster.uris)


async def sleep_until_lost(cluster, ks, on_cancel):
    """Pauses nodes ks (three of five: the held lock loses its quorum and
    is lost) and sleeps until the loss cancels this task; on_cancel() runs
    first, then the cancellation goes on."""
    cluster.pause(*ks)
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        on_cancel()
        raise
